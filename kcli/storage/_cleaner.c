/* kcli.storage._cleaner: the log cleaner's per-record work in C (optional; kcli/storage/cleaner.py keeps the
 * pure-Python path, which tests hold equal: tests/tools/test_compact_accel.py).
 *
 * OffsetMap: Kafka's SkimpyOffsetMap layout, 24 bytes a slot (a 16-byte map key and an 8-byte offset) in one
 * open-addressing table with linear probing. The map key is the key itself when it is shorter than 16 bytes
 * (zero-padded, its length in the last byte) and the key's MD5 digest otherwise, the same equivalence as
 * cleaner.map_key. The table grows by doubling up to max_memory / 24 slots; at most 90 % of those are used
 * (Kafka's dupBufferLoadFactor), counted exactly as the pure map counts entries.
 *
 * add_batch / filter_batch / retain walk the records of a decompressed v2 records area in one pass each. They
 * are strict (every length inside its record, nothing after the last record): whatever they reject they leave
 * to the pure-Python path, which decides it or raises kcli's error with its position.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SLOT_BYTES 24
#define INITIAL_SLOTS 1024

/* -- MD5 (RFC 1321) ------------------------------------------------------------------------------------ */

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
static const uint8_t MD5_S[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

static inline uint32_t rotl32(uint32_t x, unsigned r) { return (x << r) | (x >> (32 - r)); }

static void md5_block(uint32_t h[4], const uint8_t *block) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++) {
        m[i] = (uint32_t)block[4 * i] | ((uint32_t)block[4 * i + 1] << 8) | ((uint32_t)block[4 * i + 2] << 16) |
               ((uint32_t)block[4 * i + 3] << 24);
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        f = f + a + MD5_K[i] + m[g];
        a = d;
        d = c;
        c = b;
        b = b + rotl32(f, MD5_S[i]);
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void md5(const uint8_t *data, Py_ssize_t n, uint8_t out[16]) {
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    Py_ssize_t i = 0;
    for (; i + 64 <= n; i += 64) md5_block(h, data + i);
    uint8_t tail[128];
    Py_ssize_t rest = n - i;
    memcpy(tail, data + i, (size_t)rest);
    tail[rest] = 0x80;
    Py_ssize_t total = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, (size_t)(total - rest - 1));
    uint64_t bits = (uint64_t)n * 8;
    for (int k = 0; k < 8; k++) tail[total - 8 + k] = (uint8_t)(bits >> (8 * k));
    md5_block(h, tail);
    if (total == 128) md5_block(h, tail + 64);
    for (int k = 0; k < 4; k++) {
        out[4 * k] = (uint8_t)h[k];
        out[4 * k + 1] = (uint8_t)(h[k] >> 8);
        out[4 * k + 2] = (uint8_t)(h[k] >> 16);
        out[4 * k + 3] = (uint8_t)(h[k] >> 24);
    }
}

static inline void map_key(const uint8_t *key, Py_ssize_t n, uint8_t out[16]) {
    if (n < 16) {
        memset(out, 0, 16);
        memcpy(out, key, (size_t)n);
        out[15] = (uint8_t)n;
    } else {
        md5(key, n, out);
    }
}

/* -- varints (Kafka's ByteUtils.readVarint/readVarlong, zigzag) ------------------------------------------ */

/* 0 and the value, or -1: truncated at ``end``, longer than ``max_bytes``, or beyond 64 bits (values the
 * pure decoder may still accept; it decides them). */
static inline int read_varint(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int64_t *out) {
    Py_ssize_t i = *pos;
    if (i < end && d[i] < 0x80) {
        uint8_t b = d[i];
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        *pos = i + 1;
        return 0;
    }
    uint64_t raw = 0;
    int shift = 0;
    for (int n = 0; n < max_bytes; n++) {
        if (i >= end) return -1;
        uint8_t b = d[i++];
        if (shift == 63 && b > 1) return -1;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = i;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static inline Py_ssize_t write_varint(uint8_t *out, int64_t value) {
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 0;
    while (raw >= 0x80) {
        out[n++] = (uint8_t)((raw & 0x7F) | 0x80);
        raw >>= 7;
    }
    out[n++] = (uint8_t)raw;
    return n;
}

/* -- records of a decompressed v2 records area ------------------------------------------------------------ */

typedef struct {
    Py_ssize_t start, end;  /* the record, length prefix included */
    Py_ssize_t body;        /* its attributes byte */
    Py_ssize_t key_pos;     /* -1: null key */
    Py_ssize_t key_len;
    int64_t offset_delta;
    int tombstone;
    uint64_t hash;   /* of mkey (set by prepare_keys) */
    uint8_t mkey[16]; /* the map key (set by prepare_keys) */
} rec_t;

/* Parse ``count`` records covering exactly ``size`` bytes; 0 or -1 (rejected). */
static int parse_records(const uint8_t *d, Py_ssize_t size, Py_ssize_t count, rec_t *recs) {
    Py_ssize_t pos = 0;
    int64_t v;
    for (Py_ssize_t r = 0; r < count; r++) {
        rec_t *rec = &recs[r];
        rec->start = pos;
        if (read_varint(d, &pos, size, 5, &v) < 0) return -1;
        if (v < 0 || v > size - pos) return -1;
        Py_ssize_t end = pos + (Py_ssize_t)v;
        rec->end = end;
        rec->body = pos;
        if (pos >= end) return -1;
        pos += 1; /* attributes */
        if (read_varint(d, &pos, end, 10, &v) < 0) return -1; /* timestamp delta */
        if (read_varint(d, &pos, end, 5, &rec->offset_delta) < 0) return -1;
        /* a record before its batch's base offset is damage: the pure path decides or reports it (an offset of -1
         * would also read as an empty slot of the map) */
        if (rec->offset_delta < 0) return -1;
        if (read_varint(d, &pos, end, 5, &v) < 0) return -1;
        if (v < 0) {
            rec->key_pos = -1;
            rec->key_len = 0;
        } else {
            if (v > end - pos) return -1;
            rec->key_pos = pos;
            rec->key_len = (Py_ssize_t)v;
            pos += (Py_ssize_t)v;
        }
        if (read_varint(d, &pos, end, 5, &v) < 0) return -1;
        rec->tombstone = v < 0;
        if (v >= 0) {
            if (v > end - pos) return -1;
            pos += (Py_ssize_t)v;
        }
        int64_t headers;
        if (read_varint(d, &pos, end, 5, &headers) < 0) return -1;
        if (headers < 0 || headers > end - pos) return -1;
        for (int64_t h = 0; h < headers; h++) {
            if (read_varint(d, &pos, end, 5, &v) < 0 || v < 0 || v > end - pos) return -1;
            pos += (Py_ssize_t)v;
            if (read_varint(d, &pos, end, 5, &v) < 0) return -1;
            if (v >= 0) {
                if (v > end - pos) return -1;
                pos += (Py_ssize_t)v;
            }
        }
        if (pos != end) return -1;
    }
    return pos == size ? 0 : -1;
}

/* The records of a payload, or NULL with no exception set when rejected (or with MemoryError). */
static rec_t *records_of(const uint8_t *d, Py_ssize_t size, Py_ssize_t count) {
    if (count < 0 || count > size) return NULL; /* a record takes at least 7 bytes */
    rec_t *recs = PyMem_Malloc(sizeof(rec_t) * (size_t)(count ? count : 1));
    if (recs == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (parse_records(d, size, count, recs) < 0) {
        PyMem_Free(recs);
        return NULL;
    }
    return recs;
}

/* -- the offset map -------------------------------------------------------------------------------------- */

typedef struct {
    uint8_t key[16];
    int64_t offset_plus_one; /* 0: empty slot */
} slot_t;

typedef struct {
    PyObject_HEAD
    slot_t *table;
    Py_ssize_t size;      /* slots allocated */
    Py_ssize_t max_slots; /* max_memory / 24 */
    Py_ssize_t capacity;  /* entries allowed: 90 % of max_slots */
    Py_ssize_t count;
    Py_ssize_t keyless;   /* keyless records add_batch met at or after ``start`` (read/write: the pure path adds) */
    int64_t *values;      /* the mapped offsets, ascending (next_value builds it; any change frees it) */
} OffsetMapObject;

static void drop_values(OffsetMapObject *self) {
    PyMem_Free(self->values);
    self->values = NULL;
}

static inline uint64_t slot_hash(const uint8_t key[16]) {
    uint64_t a, b;
    memcpy(&a, key, 8);
    memcpy(&b, key + 8, 8);
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 31;
    h *= 0x94D049BB133111EBULL;
    h ^= h >> 29;
    return h;
}

static inline Py_ssize_t slot_index(uint64_t h, Py_ssize_t size) {
    return (Py_ssize_t)(((unsigned __int128)h * (uint64_t)size) >> 64);
}

static slot_t *find_slot_hashed(slot_t *table, Py_ssize_t size, const uint8_t key[16], uint64_t hash) {
    Py_ssize_t i = slot_index(hash, size);
    for (;;) {
        slot_t *s = &table[i];
        if (s->offset_plus_one == 0 || memcmp(s->key, key, 16) == 0) return s;
        if (++i == size) i = 0;
    }
}

static inline slot_t *find_slot(slot_t *table, Py_ssize_t size, const uint8_t key[16]) {
    return find_slot_hashed(table, size, key, slot_hash(key));
}

/* Map keys and hashes of every keyed record, and a prefetch of each one's first slot: the lookups that follow
 * then overlap their cache misses instead of waiting for each in turn. */
static void prepare_keys(OffsetMapObject *self, const uint8_t *d, rec_t *recs, Py_ssize_t count) {
    for (Py_ssize_t r = 0; r < count; r++) {
        rec_t *rec = &recs[r];
        if (rec->key_pos < 0) continue;
        map_key(d + rec->key_pos, rec->key_len, rec->mkey);
        rec->hash = slot_hash(rec->mkey);
        if (self->size) __builtin_prefetch(&self->table[slot_index(rec->hash, self->size)]);
    }
}

static int map_resize(OffsetMapObject *self, Py_ssize_t size) {
    slot_t *table = PyMem_Calloc((size_t)size, sizeof(slot_t));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->size; i++) {
        slot_t *old = &self->table[i];
        if (old->offset_plus_one) *find_slot(table, size, old->key) = *old;
    }
    PyMem_Free(self->table);
    self->table = table;
    self->size = size;
    return 0;
}

/* Insert or overwrite; the caller has checked count < capacity. 0, or -1 with MemoryError. */
static int map_put_hashed(OffsetMapObject *self, const uint8_t key[16], uint64_t hash, int64_t offset) {
    if (self->values) drop_values(self);
    slot_t *s = find_slot_hashed(self->table, self->size, key, hash);
    if (s->offset_plus_one == 0) {
        memcpy(s->key, key, 16);
        self->count++;
        if (self->count * 4 > self->size * 3 && self->size < self->max_slots) {
            s->offset_plus_one = offset + 1;
            Py_ssize_t grown = self->size > self->max_slots / 2 ? self->max_slots : self->size * 2;
            return map_resize(self, grown);
        }
    }
    s->offset_plus_one = offset + 1;
    return 0;
}

static inline int map_put(OffsetMapObject *self, const uint8_t key[16], int64_t offset) {
    return map_put_hashed(self, key, slot_hash(key), offset);
}

static int64_t map_get(OffsetMapObject *self, const uint8_t key[16]) {
    if (self->size == 0) return -1;
    slot_t *s = find_slot(self->table, self->size, key);
    return s->offset_plus_one - 1;
}

static int OffsetMap_init(OffsetMapObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"max_memory", NULL};
    long long max_memory;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L", kwlist, &max_memory)) return -1;
    if (max_memory < 0) max_memory = 0;
    long long slots = max_memory / SLOT_BYTES;
    if (slots > PY_SSIZE_T_MAX / (long long)sizeof(slot_t)) slots = PY_SSIZE_T_MAX / (long long)sizeof(slot_t);
    PyMem_Free(self->table);
    drop_values(self);
    self->table = NULL;
    self->size = self->count = self->keyless = 0;
    self->max_slots = (Py_ssize_t)slots;
    self->capacity = (Py_ssize_t)((double)slots * 0.9); /* int(slots * OFFSET_MAP_LOAD_FACTOR), as the pure map */
    if (self->max_slots > 0) return map_resize(self, self->max_slots < INITIAL_SLOTS ? self->max_slots : INITIAL_SLOTS);
    return 0;
}

static void OffsetMap_dealloc(OffsetMapObject *self) {
    PyMem_Free(self->table);
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t OffsetMap_len(OffsetMapObject *self) { return self->count; }

static int key_arg(PyObject *arg, uint8_t out[16]) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return -1;
    map_key(view.buf, view.len, out);
    PyBuffer_Release(&view);
    return 0;
}

static PyObject *OffsetMap_get(OffsetMapObject *self, PyObject *arg) {
    uint8_t key[16];
    if (key_arg(arg, key) < 0) return NULL;
    return PyLong_FromLongLong(map_get(self, key));
}

/* put(key, offset): False (nothing stored) when the map is full. */
static PyObject *OffsetMap_put(OffsetMapObject *self, PyObject *args) {
    PyObject *key_obj;
    long long offset;
    uint8_t key[16];
    if (!PyArg_ParseTuple(args, "OL", &key_obj, &offset)) return NULL;
    if (key_arg(key_obj, key) < 0) return NULL;
    if (self->count >= self->capacity) Py_RETURN_FALSE;
    if (map_put(self, key, offset) < 0) return NULL;
    Py_RETURN_TRUE;
}

/* add_batch(payload, count, base_offset, start) -> 0 done, 1 full (stopped before a record, as the pure map
 * does: the records before it stay mapped), -1 rejected (nothing mapped: the pure path decides). */
static PyObject *OffsetMap_add_batch(OffsetMapObject *self, PyObject *args) {
    Py_buffer payload;
    Py_ssize_t count;
    long long base_offset, start;
    if (!PyArg_ParseTuple(args, "y*nLL", &payload, &count, &base_offset, &start)) return NULL;
    const uint8_t *d = payload.buf;
    rec_t *recs = records_of(d, payload.len, count);
    if (recs == NULL) {
        PyBuffer_Release(&payload);
        if (PyErr_Occurred()) return NULL;
        return PyLong_FromLong(-1);
    }
    long status = 0;
    prepare_keys(self, d, recs, count);
    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t offset;
        if (__builtin_add_overflow((int64_t)base_offset, recs[r].offset_delta, &offset)) {
            status = -1; /* cannot happen before a record was mapped: offsets only grow */
            break;
        }
        if (offset < start) continue;
        if (recs[r].key_pos < 0) {
            self->keyless++;
            continue;
        }
        if (self->count >= self->capacity) {
            status = 1;
            break;
        }
        if (map_put_hashed(self, recs[r].mkey, recs[r].hash, offset) < 0) {
            PyMem_Free(recs);
            PyBuffer_Release(&payload);
            return NULL;
        }
    }
    PyMem_Free(recs);
    PyBuffer_Release(&payload);
    return PyLong_FromLong(status);
}

/* filter_batch(payload, count, base_offset, latest, drop_tombstones) -> None (rejected) or
 * (mask, kept, keyless_dropped, tombstones_dropped, tombstones_kept): the cleaner's record decisions
 * (cleaner._filter_group); mask is None when every record stays, else bytes, 1 for each kept record. */
static PyObject *OffsetMap_filter_batch(OffsetMapObject *self, PyObject *args) {
    Py_buffer payload;
    Py_ssize_t count;
    long long base_offset, latest;
    int drop_tombstones;
    if (!PyArg_ParseTuple(args, "y*nLLp", &payload, &count, &base_offset, &latest, &drop_tombstones)) return NULL;
    const uint8_t *d = payload.buf;
    rec_t *recs = records_of(d, payload.len, count);
    if (recs == NULL) {
        PyBuffer_Release(&payload);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *mask = PyBytes_FromStringAndSize(NULL, count);
    if (mask == NULL) {
        PyMem_Free(recs);
        PyBuffer_Release(&payload);
        return NULL;
    }
    uint8_t *m = (uint8_t *)PyBytes_AS_STRING(mask);
    Py_ssize_t kept = 0, keyless = 0, tombstones_dropped = 0, tombstones_kept = 0;
    int rejected = 0;
    prepare_keys(self, d, recs, count);
    for (Py_ssize_t r = 0; r < count; r++) {
        rec_t *rec = &recs[r];
        int64_t offset;
        if (__builtin_add_overflow((int64_t)base_offset, rec->offset_delta, &offset)) {
            rejected = 1;
            break;
        }
        m[r] = 0;
        if (offset <= latest) {
            if (rec->key_pos < 0) {
                keyless++;
                continue;
            }
            if (self->size && offset < find_slot_hashed(self->table, self->size, rec->mkey, rec->hash)->offset_plus_one - 1)
                continue;
            if (rec->tombstone && drop_tombstones) {
                tombstones_dropped++;
                continue;
            }
        }
        m[r] = 1;
        kept++;
        tombstones_kept += rec->tombstone;
    }
    PyMem_Free(recs);
    PyBuffer_Release(&payload);
    if (rejected) {
        Py_DECREF(mask);
        Py_RETURN_NONE;
    }
    if (kept == count) {
        Py_DECREF(mask);
        mask = Py_None;
        Py_INCREF(mask);
    }
    return Py_BuildValue("(Nnnnn)", mask, kept, keyless, tombstones_dropped, tombstones_kept);
}

static int compare_offsets(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* next_value(offset) -> the smallest mapped offset >= offset, or 2**63 - 1: a batch holding no mapped offset
 * keeps none of its keyed records from the mapped section (each is superseded by its key's mapped one). The
 * sorted offsets (8 bytes an entry) are built on the first call and kept until the map changes. */
static PyObject *OffsetMap_next_value(OffsetMapObject *self, PyObject *arg) {
    long long offset = PyLong_AsLongLong(arg);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    if (self->values == NULL && self->count > 0) {
        int64_t *values = PyMem_Malloc((size_t)self->count * sizeof(int64_t));
        if (values == NULL) return PyErr_NoMemory();
        Py_ssize_t n = 0;
        for (Py_ssize_t i = 0; i < self->size; i++)
            if (self->table[i].offset_plus_one) values[n++] = self->table[i].offset_plus_one - 1;
        qsort(values, (size_t)n, sizeof(int64_t), compare_offsets);
        self->values = values;
    }
    Py_ssize_t lo = 0, hi = self->count;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (self->values[mid] < offset) lo = mid + 1;
        else hi = mid;
    }
    return PyLong_FromLongLong(lo < self->count ? self->values[lo] : INT64_MAX);
}

/* dump() -> bytes: every entry as 16-byte map key + 8-byte offset (native order), for merge() elsewhere. */
static PyObject *OffsetMap_dump(OffsetMapObject *self, PyObject *unused) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->count * SLOT_BYTES);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < self->size; i++) {
        slot_t *s = &self->table[i];
        if (s->offset_plus_one) {
            int64_t offset = s->offset_plus_one - 1;
            memcpy(p, s->key, 16);
            memcpy(p + 16, &offset, 8);
            p += SLOT_BYTES;
        }
    }
    return out;
}

/* merge(dumped): put every entry of another map's dump(), ignoring capacity (the caller checked it). */
static PyObject *OffsetMap_merge(OffsetMapObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (view.len % SLOT_BYTES) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "not an offset map dump");
        return NULL;
    }
    const uint8_t *p = view.buf;
    /* Grown first to hold them all: a dump comes in slot order, i.e. sorted by hash, and sorted keys poured
     * into a smaller table pile up in one probe run (quadratic). */
    Py_ssize_t needed = self->count + view.len / SLOT_BYTES, target = self->size;
    while (target < self->max_slots && target * 3 < needed * 4)
        target = target > self->max_slots / 2 ? self->max_slots : (target ? target * 2 : INITIAL_SLOTS);
    if (target != self->size && map_resize(self, target) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < view.len; i += SLOT_BYTES) {
        int64_t offset;
        memcpy(&offset, p + i + 16, 8);
        if (self->count + 1 >= self->max_slots) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "the offset map is full");
            return NULL;
        }
        if (map_put(self, p + i, offset) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *OffsetMap_memory_bytes(OffsetMapObject *self, void *closure) {
    return PyLong_FromSsize_t(self->size * (Py_ssize_t)sizeof(slot_t));
}

static PyObject *OffsetMap_capacity(OffsetMapObject *self, void *closure) { return PyLong_FromSsize_t(self->capacity); }

static PyMethodDef OffsetMap_methods[] = {
    {"get", (PyCFunction)OffsetMap_get, METH_O, "get(key) -> the key's latest mapped offset, or -1"},
    {"put", (PyCFunction)OffsetMap_put, METH_VARARGS, "put(key, offset) -> False when the map is full"},
    {"add_batch", (PyCFunction)OffsetMap_add_batch, METH_VARARGS,
     "add_batch(payload, count, base_offset, start) -> 0 done, 1 full, -1 rejected"},
    {"filter_batch", (PyCFunction)OffsetMap_filter_batch, METH_VARARGS,
     "filter_batch(payload, count, base_offset, latest, drop_tombstones) -> None or "
     "(mask, kept, keyless_dropped, tombstones_dropped, tombstones_kept)"},
    {"next_value", (PyCFunction)OffsetMap_next_value, METH_O,
     "next_value(offset) -> the smallest mapped offset >= offset, or 2**63 - 1"},
    {"dump", (PyCFunction)OffsetMap_dump, METH_NOARGS, "dump() -> bytes of 24-byte entries"},
    {"merge", (PyCFunction)OffsetMap_merge, METH_O, "merge(dump): put another map's entries"},
    {NULL, NULL, 0, NULL},
};

static PyObject *OffsetMap_get_keyless(OffsetMapObject *self, void *closure) { return PyLong_FromSsize_t(self->keyless); }

static int OffsetMap_set_keyless(OffsetMapObject *self, PyObject *value, void *closure) {
    Py_ssize_t n = value == NULL ? -1 : PyLong_AsSsize_t(value);
    if (n == -1 && (value == NULL || PyErr_Occurred())) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "keyless cannot be deleted");
        return -1;
    }
    self->keyless = n;
    return 0;
}

static PyGetSetDef OffsetMap_getset[] = {
    {"keyless", (getter)OffsetMap_get_keyless, (setter)OffsetMap_set_keyless,
     "keyless records add_batch met at or after start (the pure path adds its own)", NULL},
    {"memory_bytes", (getter)OffsetMap_memory_bytes, NULL, "bytes of the slot table", NULL},
    {"capacity", (getter)OffsetMap_capacity, NULL, "entries the map may hold", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods OffsetMap_as_sequence = {
    .sq_length = (lenfunc)OffsetMap_len,
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kcli.storage._cleaner.OffsetMap",
    .tp_basicsize = sizeof(OffsetMapObject),
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_as_sequence = &OffsetMap_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OffsetMap(max_memory): key -> latest offset, 24 bytes a slot (Kafka's SkimpyOffsetMap)",
    .tp_methods = OffsetMap_methods,
    .tp_getset = OffsetMap_getset,
    .tp_init = (initproc)OffsetMap_init,
    .tp_new = PyType_GenericNew,
};

/* -- retain ------------------------------------------------------------------------------------------------ */

/* retain(payload, count, mask, old_base, delete_horizon, append_time) -> None (rejected) or
 * (records, new_base): batch.retain_records' records area for the kept records (mask: 1 per kept record, at
 * least one), before compression. delete_horizon / append_time: an int or None. */
static PyObject *retain(PyObject *module, PyObject *args) {
    Py_buffer payload, mask;
    Py_ssize_t count;
    long long old_base;
    PyObject *horizon_obj, *append_obj;
    if (!PyArg_ParseTuple(args, "y*ny*LOO", &payload, &count, &mask, &old_base, &horizon_obj, &append_obj))
        return NULL;
    PyObject *result = NULL;
    const uint8_t *d = payload.buf;
    const uint8_t *m = mask.buf;
    rec_t *recs = NULL;
    uint8_t *out = NULL;
    int has_append = append_obj != Py_None;
    long long horizon = 0, append_time = 0;
    if (horizon_obj != Py_None && (horizon = PyLong_AsLongLong(horizon_obj)) == -1 && PyErr_Occurred()) goto done;
    if (has_append && (append_time = PyLong_AsLongLong(append_obj)) == -1 && PyErr_Occurred()) goto done;
    if (mask.len != count) goto rejected;
    recs = records_of(d, payload.len, count);
    if (recs == NULL) goto rejected;
    Py_ssize_t first = -1;
    for (Py_ssize_t r = 0; r < count; r++) {
        if (m[r]) {
            first = r;
            break;
        }
    }
    if (first < 0) goto rejected;
    int64_t new_base;
    if (horizon_obj != Py_None) {
        new_base = horizon;
    } else if (has_append) {
        new_base = append_time;
    } else {
        Py_ssize_t pos = recs[first].body + 1;
        int64_t delta;
        if (read_varint(d, &pos, recs[first].end, 10, &delta) < 0) goto rejected;
        if (__builtin_add_overflow((int64_t)old_base, delta, &new_base)) goto rejected;
    }
    /* A re-encoded head grows by at most 10 (timestamp) + 5 (length) bytes a record. */
    out = PyMem_Malloc((size_t)payload.len + 16 * (size_t)count + 1);
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t r = 0; r < count; r++) {
        if (!m[r]) continue;
        rec_t *rec = &recs[r];
        Py_ssize_t after = rec->body + 1;
        int64_t delta, timestamp, new_delta;
        if (read_varint(d, &after, rec->end, 10, &delta) < 0) goto rejected;
        if (has_append) {
            timestamp = append_time;
        } else if (__builtin_add_overflow((int64_t)old_base, delta, &timestamp)) {
            goto rejected;
        }
        if (__builtin_sub_overflow(timestamp, new_base, &new_delta)) goto rejected;
        if (new_delta == delta && d[rec->body] == 0) {
            memcpy(out + n, d + rec->start, (size_t)(rec->end - rec->start));
            n += rec->end - rec->start;
            continue;
        }
        uint8_t head[11];
        Py_ssize_t head_len = write_varint(head, new_delta);
        Py_ssize_t rest = rec->end - after;
        n += write_varint(out + n, (int64_t)(1 + head_len + rest));
        out[n++] = 0;
        memcpy(out + n, head, (size_t)head_len);
        n += head_len;
        memcpy(out + n, d + after, (size_t)rest);
        n += rest;
    }
    PyObject *records = PyBytes_FromStringAndSize((const char *)out, n);
    if (records != NULL) result = Py_BuildValue("(NL)", records, (long long)new_base);
    goto done;
rejected:
    if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    PyMem_Free(out);
    PyMem_Free(recs);
    PyBuffer_Release(&payload);
    PyBuffer_Release(&mask);
    return result;
}

/* map_key(key) -> the 16-byte slot key (tests compare it with cleaner.map_key's classes). */
static PyObject *py_map_key(PyObject *module, PyObject *arg) {
    uint8_t key[16];
    if (key_arg(arg, key) < 0) return NULL;
    return PyBytes_FromStringAndSize((const char *)key, 16);
}

static PyMethodDef module_methods[] = {
    {"retain", retain, METH_VARARGS,
     "retain(payload, count, mask, old_base, delete_horizon, append_time) -> None or (records, new_base)"},
    {"map_key", py_map_key, METH_O, "map_key(key) -> the 16-byte slot key"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kcli.storage._cleaner",
    "The log cleaner's per-record work in C (optional; kcli.storage.cleaner keeps the pure path).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__cleaner(void) {
    if (PyType_Ready(&OffsetMapType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(module, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "SLOT_BYTES", SLOT_BYTES) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
