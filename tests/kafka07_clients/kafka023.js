// The npm package kafka 0.2.3 (a Kafka 0.7 client: magic 0 messages, no compression) against kctl's 0.7 listener.
// usage: node kafka023.js <port> <topic> <partition> <count>
//   produces <count> messages "kafka023-<i>" (one produce request each), then consumes the partition from byte
//   offset 0 until it has read them all back; prints {"messages": [...], "offsets": [...]} as JSON on stdout.
var kafka = require('kafka')
var port = +process.argv[2], topic = process.argv[3], partition = +process.argv[4], count = +process.argv[5]
var sent = []
for (var i = 0; i < count; i++) sent.push('kafka023-' + i)

var producer = new kafka.Producer({host: '127.0.0.1', port: port, topic: topic, partition: partition})
producer.on('error', function (err) { console.error('producer error', err); process.exit(2) })
producer.connect(function () {
	for (var i = 0; i < sent.length; i++) producer.send(sent[i])
	producer.close()
	consume()
})

function consume() {
	var got = [], offsets = []
	var consumer = new kafka.Consumer({host: '127.0.0.1', port: port, pollInterval: 100})
	consumer.on('error', function (code, name) { console.error('consumer error', code, name); process.exit(3) })
	consumer.on('message', function (t, message, offset) {
		got.push(message)
		offsets.push(offset)
		if (got.length >= sent.length) {
			console.log(JSON.stringify({messages: got, offsets: offsets}))
			consumer.close()
			process.exit(0)
		}
	})
	consumer.connect(function () { consumer.subscribeTopic({name: topic, partition: partition, offset: 0}) })
}
