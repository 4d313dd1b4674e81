// The npm package franz-kafka 0.7.5 (a Kafka 0.7 client: magic 1 messages, gzip and snappy wrappers) against kctl's
// 0.7 listener. Prints {"messages": [...]} as JSON on stdout once it has read back what it wrote.
// usage: node franz.js static <port> <topic> <compression> <count> [<prefix>]
//          produce <count> messages to broker 0 partition 0, then consume partition 0-0 from byte offset 0
//        node franz.js zk <zookeeper host:port> <chroot> <topic> <compression> <count> [<prefix>]
//          find the broker and the topic's partitions in ZooKeeper (in <chroot>), produce, then consume
//          through the ZooKeeper consumer (its group registered in the same chroot)
var mode = process.argv[2]
var args = process.argv.slice(3)

if (mode === 'zk') {
	// franz-kafka hands zkjs no chroot; zkjs's own `root` option keeps every path under one
	var chroot = args[1]
	var zkjsPath = require.resolve('zkjs')
	var ZooKeeper = require(zkjsPath)
	function Chrooted(options) {  // zkjs's ZK is a factory: `new` returns its session
		options.root = chroot
		return ZooKeeper(options)
	}
	Object.keys(ZooKeeper).forEach(function (k) { Chrooted[k] = ZooKeeper[k] })
	require.cache[zkjsPath].exports = Chrooted
}

var Kafka = require('franz-kafka')
var options, topicName, compression, count, prefix
if (mode === 'static') {
	options = {brokers: [{id: 0, host: '127.0.0.1', port: +args[0]}]}
	topicName = args[1]; compression = args[2]; count = +args[3]; prefix = args[4] || 'franz'
} else {
	options = {zookeeper: [args[0]]}
	topicName = args[2]; compression = args[3]; count = +args[4]; prefix = args[5] || 'franz'
}
options.compression = compression
options.queueTime = 50
options.batchSize = 5
options.minFetchDelay = 50
options.maxFetchDelay = 200
var kafka = new Kafka(options)

var sent = []
for (var i = 0; i < count; i++) sent.push(prefix + '-' + compression + '-' + i)

function fail(what, err) {
	console.error(what, err && (err.message || err))
	process.exit(2)
}

setTimeout(function () { fail('timed out; read so far:', JSON.stringify(got)) }, 60000)
var got = []

kafka.connect(function () {
	var topicOptions = mode === 'static'
		? {partitions: {produce: ['0:1'], consume: ['0-0:0']}}
		: {}
	var topic = kafka.topic(topicName, topicOptions)
	topic.on('error', function (err) { fail('topic error', err) })
	topic.setEncoding('utf8')
	topic.on('data', function (data) {
		got.push(data)
		if (got.length >= sent.length) {
			console.log(JSON.stringify({messages: got}))
			process.exit(0)
		}
	})
	var write = function () {
		for (var i = 0; i < sent.length; i++) topic.write(sent[i])
		topic.resume()
	}
	if (mode === 'static') write()
	else setTimeout(write, 500)  // the writable partitions come from ZooKeeper's /brokers/topics
})
