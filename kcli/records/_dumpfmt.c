/* kcli.records._dumpfmt: the records of one decompressed v2 batch payload formatted in bulk, as
 * kcli/tools/dump_json.py (`dump-log --deep-iteration --json`) and kcli/tools/dump_text.py (kafka-dump-log
 * text, --print-data-log) format them record by record in Python.
 *
 * Optional: kcli works without it (KCLI_NO_EXTENSIONS=1 forces the pure path), and the tests hold both
 * paths byte-identical (tests/tools/test_dump_accel.py). Anything unusual (a record that does not parse
 * strictly, a header key that is not valid UTF-8, an offset or timestamp out of int64 range) makes a
 * function return None and the caller formats the batch in Python, which also reports errors.
 *
 * Record => Length:varint Attributes:int8 TimestampDelta:varlong OffsetDelta:varint
 *           Key:varint-bytes Value:varint-bytes Headers:[varint-string varint-bytes]
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef unsigned char uchar;

/* -- output buffer ------------------------------------------------------------------------------ */
typedef struct {
    char *buf;
    size_t len, cap;
} Out;

static int out_grow(Out *o, size_t extra) {
    size_t need = o->len + extra;
    if (need <= o->cap) return 0;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < need) cap *= 2;
    char *b = PyMem_Realloc(o->buf, cap);
    if (!b) { PyErr_NoMemory(); return -1; }
    o->buf = b;
    o->cap = cap;
    return 0;
}

#define RESERVE(o, n) do { if ((o)->len + (size_t)(n) > (o)->cap && out_grow((o), (n)) < 0) goto fail; } while (0)

static inline void put(Out *o, const void *p, size_t n) { memcpy(o->buf + o->len, p, n); o->len += n; }
static inline void putc_(Out *o, char c) { o->buf[o->len++] = c; }

static void put_i64(Out *o, int64_t v) { /* needs 20 bytes reserved */
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[--i] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) tmp[--i] = '-';
    put(o, tmp + i, 24 - i);
}

/* -- varints (zigzag) ---------------------------------------------------------------------------- */
/* 0 on success; -1 when malformed or out of range (the caller then returns None). */
static inline int read_varint(const uchar **pp, const uchar *end, int64_t *out) {
    const uchar *p = *pp;
    if (p >= end) return -1;
    uint32_t b = *p++;
    if (b < 0x80) {
        *out = (b & 1) ? -(int64_t)(b >> 1) - 1 : (int64_t)(b >> 1);
        *pp = p;
        return 0;
    }
    uint64_t raw = b & 0x7F;
    int shift = 7;
    for (int i = 1; i < 5; i++) {
        if (p >= end) return -1;
        b = *p++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (raw > 0xFFFFFFFFu) return -1;
            *out = (raw & 1) ? -(int64_t)(raw >> 1) - 1 : (int64_t)(raw >> 1);
            *pp = p;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static inline int read_varlong(const uchar **pp, const uchar *end, int64_t *out) {
    const uchar *p = *pp;
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return -1;
        uint64_t b = *p++;
        if (i == 9 && b > 1) return -1; /* beyond 64 bits */
        raw |= (b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (raw & 1) ? -(int64_t)(raw >> 1) - 1 : (int64_t)(raw >> 1);
            *pp = p;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* -- one record ---------------------------------------------------------------------------------- */
typedef struct {
    int64_t offset, timestamp, offset_delta;
    const uchar *key, *value, *headers;
    int64_t key_len, value_len; /* -1: null */
    int64_t header_count;
    const uchar *record_end;
} Rec;

typedef struct {
    int64_t base_offset, base_ts, max_ts, base_seq;
    int log_append;
} BatchInfo;

/* Parse the record at *pp; 0 on success, -1 when it does not parse strictly. */
static int parse_record(const uchar **pp, const uchar *end, const BatchInfo *bi, Rec *r) {
    const uchar *p = *pp;
    int64_t length, ts_delta, n;
    if (read_varint(&p, end, &length) < 0 || length < 1 || length > end - p) return -1;
    const uchar *rend = p + length;
    p++; /* attributes */
    if (read_varlong(&p, rend, &ts_delta) < 0) return -1;
    if (read_varint(&p, rend, &r->offset_delta) < 0) return -1;
    if (read_varint(&p, rend, &n) < 0 || n < -1 || n > rend - p) return -1;
    r->key = p; r->key_len = n;
    if (n > 0) p += n;
    if (read_varint(&p, rend, &n) < 0 || n < -1 || n > rend - p) return -1;
    r->value = p; r->value_len = n;
    if (n > 0) p += n;
    if (read_varint(&p, rend, &n) < 0 || n < 0 || n > rend - p) return -1;
    r->header_count = n;
    r->headers = p;
    for (int64_t h = 0; h < r->header_count; h++) {
        if (read_varint(&p, rend, &n) < 0 || n < 0 || n > rend - p) return -1;
        p += n;
        if (read_varint(&p, rend, &n) < 0 || n < -1 || n > rend - p) return -1;
        if (n > 0) p += n;
    }
    if (p != rend) return -1;
    if (__builtin_add_overflow(bi->base_offset, r->offset_delta, &r->offset)) return -1;
    if (bi->log_append) r->timestamp = bi->max_ts;
    else if (__builtin_add_overflow(bi->base_ts, ts_delta, &r->timestamp)) return -1;
    r->record_end = rend;
    *pp = rend;
    return 0;
}

/* DefaultRecordBatch.incrementSequence; -1 without a base sequence */
static inline int64_t sequence_of(const BatchInfo *bi, int64_t delta) {
    if (bi->base_seq < 0) return -1;
    const int64_t max = 2147483647;
    if (bi->base_seq > max - delta) return delta - (max - bi->base_seq) - 1;
    return bi->base_seq + delta;
}

/* -- UTF-8 ---------------------------------------------------------------------------------------- */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load8(const uchar *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Length of the well-formed UTF-8 sequence at p (1-4), or 0 with *bad = the maximal subpart's length
 * (Python's "replace" substitutes one U+FFFD per maximal subpart). */
static inline int utf8_seq(const uchar *p, const uchar *end, int *bad) {
    uchar c = p[0];
    int need;
    uchar lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c < 0xC2) { *bad = 1; return 0; }
    if (c < 0xE0) need = 2;
    else if (c < 0xF0) { need = 3; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
    else if (c < 0xF5) { need = 4; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
    else { *bad = 1; return 0; }
    for (int i = 1; i < need; i++) {
        if (p + i >= end) { *bad = i; return 0; }
        uchar b = p[i];
        if (b < lo || b > hi) { *bad = i; return 0; }
        lo = 0x80; hi = 0xBF;
    }
    return need;
}

static int utf8_valid(const uchar *p, size_t n) {
    const uchar *end = p + n;
    while (p < end) {
        if (end - p >= 8 && !(load8(p) & HIGHS)) { p += 8; continue; }
        int bad, k = utf8_seq(p, end, &bad);
        if (!k) return 0;
        p += k;
    }
    return 1;
}

static const char HEX[] = "0123456789abcdef";

/* A JSON string as orjson writes it: `"`, `\` and C0 controls escaped, nothing else.
 * Returns 0, or 1 when the bytes are not valid UTF-8 (the output is left as it was). Reserves itself. */
static int json_string(Out *o, const uchar *p, size_t n) {
    size_t mark = o->len;
    if (o->len + 6 * n + 2 > o->cap && out_grow(o, 6 * n + 2) < 0) return -1;
    char *w = o->buf + o->len;
    const uchar *end = p + n;
    *w++ = '"';
    while (p < end) {
        if (end - p >= 8) {
            uint64_t v = load8(p);
            uint64_t t = ((v - ONES * 0x20) & ~v) | (((v ^ (ONES * 0x22)) - ONES) & ~(v ^ (ONES * 0x22)))
                       | (((v ^ (ONES * 0x5C)) - ONES) & ~(v ^ (ONES * 0x5C))) | v;
            if (!(t & HIGHS)) { memcpy(w, p, 8); w += 8; p += 8; continue; }
        }
        uchar c = *p;
        if (c >= 0x80) {
            int bad, k = utf8_seq(p, end, &bad);
            if (!k) { o->len = mark; return 1; }
            memcpy(w, p, k); w += k; p += k;
            continue;
        }
        if (c == '"' || c == '\\') { *w++ = '\\'; *w++ = (char)c; }
        else if (c < 0x20) {
            *w++ = '\\';
            switch (c) {
            case '\b': *w++ = 'b'; break;
            case '\t': *w++ = 't'; break;
            case '\n': *w++ = 'n'; break;
            case '\f': *w++ = 'f'; break;
            case '\r': *w++ = 'r'; break;
            default: *w++ = 'u'; *w++ = '0'; *w++ = '0'; *w++ = HEX[c >> 4]; *w++ = HEX[c & 15];
            }
        } else *w++ = (char)c;
        p++;
    }
    *w++ = '"';
    o->len = (size_t)(w - o->buf);
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* kcli's AUTO bytes in JSON: null, the text, or {"base64":"..."} for bytes that are not UTF-8. */
static int json_bytes(Out *o, const uchar *p, int64_t n) {
    if (n < 0) {
        if (out_grow(o, 4) < 0) return -1;
        put(o, "null", 4);
        return 0;
    }
    int rc = json_string(o, p, (size_t)n);
    if (rc <= 0) return rc;
    size_t need = 14 + ((size_t)n + 2) / 3 * 4;
    if (out_grow(o, need) < 0) return -1;
    put(o, "{\"base64\":\"", 11);
    char *w = o->buf + o->len;
    size_t i = 0, len = (size_t)n;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *w++ = B64[v >> 18]; *w++ = B64[(v >> 12) & 63]; *w++ = B64[(v >> 6) & 63]; *w++ = B64[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *w++ = B64[v >> 18]; *w++ = B64[(v >> 12) & 63]; *w++ = '='; *w++ = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *w++ = B64[v >> 18]; *w++ = B64[(v >> 12) & 63]; *w++ = B64[(v >> 6) & 63]; *w++ = '=';
    }
    *w++ = '"'; *w++ = '}';
    o->len = (size_t)(w - o->buf);
    return 0;
}

/* bytes.decode("utf-8", "replace"), as UTF-8: one U+FFFD per maximal ill-formed subpart. */
static int text_replace(Out *o, const uchar *p, size_t n) {
    if (out_grow(o, 3 * n) < 0) return -1;
    char *w = o->buf + o->len;
    const uchar *end = p + n;
    while (p < end) {
        if (end - p >= 8 && !(load8(p) & HIGHS)) { memcpy(w, p, 8); w += 8; p += 8; continue; }
        if (*p < 0x80) { *w++ = (char)*p++; continue; }
        int bad, k = utf8_seq(p, end, &bad);
        if (k) { memcpy(w, p, k); w += k; p += k; }
        else { *w++ = (char)0xEF; *w++ = (char)0xBF; *w++ = (char)0xBD; p += bad; }
    }
    o->len = (size_t)(w - o->buf);
    return 0;
}

/* -- the module's functions ------------------------------------------------------------------------ */
static PyObject *finish(Out *o) {
    PyObject *s = PyUnicode_DecodeUTF8(o->buf ? o->buf : "", (Py_ssize_t)o->len, "strict");
    PyMem_Free(o->buf);
    return s;
}

static PyObject *give_up(Out *o) {
    PyMem_Free(o->buf);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(scan_doc,
"scan(payload, count) -> (first_offset_delta, last_offset_delta, consecutive) or None\n\n"
"Walk the records of a decompressed v2 payload: None unless exactly `count` records parse strictly\n"
"and fill it. `consecutive`: every offset delta is the previous one plus one.");

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count)) return NULL;
    const uchar *p = view.buf, *end = p + view.len;
    BatchInfo bi = {0, 0, 0, -1, 1};
    Rec r;
    int64_t first = 0, prev = 0;
    int consecutive = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (parse_record(&p, end, &bi, &r) < 0) { PyBuffer_Release(&view); Py_RETURN_NONE; }
        if (i == 0) first = r.offset_delta;
        else if (r.offset_delta != prev + 1) consecutive = 0;
        prev = r.offset_delta;
    }
    PyBuffer_Release(&view);
    if (count <= 0 || p != end) Py_RETURN_NONE;
    return Py_BuildValue("LLO", (long long)first, (long long)prev, consecutive ? Py_True : Py_False);
}

PyDoc_STRVAR(format_json_doc,
"format_json(payload, count, base_offset, base_timestamp, max_timestamp, log_append_time, base_sequence,\n"
"            prefix, timestamp_type, suffix) -> str or None\n\n"
"The NDJSON lines of kcli.tools.dump_json for every record (AUTO encodings), joined by newlines;\n"
"prefix ends with '\"offset\":', timestamp_type is ',\"timestamp_type\":\"...\"', suffix is what\n"
"precedes ',\"sequence\":'. None when a record needs the Python path.");

static PyObject *format_json(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count, prefix_len, tstype_len, suffix_len;
    long long base_offset, base_ts, max_ts, base_seq;
    int log_append;
    const char *prefix, *tstype, *suffix;
    if (!PyArg_ParseTuple(args, "y*nLLLpLy#y#y#", &view, &count, &base_offset, &base_ts, &max_ts, &log_append,
                          &base_seq, &prefix, &prefix_len, &tstype, &tstype_len, &suffix, &suffix_len))
        return NULL;
    BatchInfo bi = {base_offset, base_ts, max_ts, base_seq, log_append};
    const uchar *p = view.buf, *end = p + view.len;
    Out o = {NULL, 0, 0};
    Rec r;
    if (count <= 0) goto none;
    size_t fixed = (size_t)(prefix_len + tstype_len + suffix_len) + 200;
    /* a record takes at least 7 bytes of payload: the count cannot inflate the first reservation */
    size_t guess = (size_t)(count < view.len / 7 ? count : view.len / 7 + 1);
    if (out_grow(&o, (size_t)view.len * 2 + guess * fixed) < 0) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (parse_record(&p, end, &bi, &r) < 0) goto none;
        RESERVE(&o, fixed);
        if (i) putc_(&o, '\n');
        put(&o, prefix, prefix_len);
        put_i64(&o, r.offset);
        put(&o, ",\"timestamp\":", 13);
        put_i64(&o, r.timestamp);
        put(&o, tstype, tstype_len);
        put(&o, ",\"key_size\":", 12);
        put_i64(&o, r.key_len);
        put(&o, ",\"value_size\":", 14);
        put_i64(&o, r.value_len);
        put(&o, ",\"key\":", 7);
        if (json_bytes(&o, r.key, r.key_len) < 0) goto fail;
        RESERVE(&o, 20);
        put(&o, ",\"value\":", 9);
        if (json_bytes(&o, r.value, r.value_len) < 0) goto fail;
        RESERVE(&o, 16);
        put(&o, ",\"headers\":[", 12);
        const uchar *h = r.headers;
        for (int64_t j = 0; j < r.header_count; j++) {
            int64_t n = 0;
            read_varint(&h, r.record_end, &n);
            RESERVE(&o, 20);
            if (j) putc_(&o, ',');
            put(&o, "{\"key\":", 7);
            int rc = json_string(&o, h, (size_t)n);
            if (rc < 0) goto fail;
            if (rc > 0) goto none; /* a key that is not UTF-8: the Python path's replacement rules */
            h += n;
            read_varint(&h, r.record_end, &n);
            RESERVE(&o, 12);
            put(&o, ",\"value\":", 9);
            if (json_bytes(&o, h, n) < 0) goto fail;
            if (n > 0) h += n;
            RESERVE(&o, 2);
            putc_(&o, '}');
        }
        RESERVE(&o, (size_t)suffix_len + 40);
        putc_(&o, ']');
        put(&o, suffix, suffix_len);
        put(&o, ",\"sequence\":", 12);
        put_i64(&o, sequence_of(&bi, r.offset_delta));
        putc_(&o, '}');
    }
    PyBuffer_Release(&view);
    return finish(&o);
none:
    PyBuffer_Release(&view);
    return give_up(&o);
fail:
    PyBuffer_Release(&view);
    PyMem_Free(o.buf);
    return NULL;
}

PyDoc_STRVAR(format_text_doc,
"format_text(payload, count, base_offset, base_timestamp, max_timestamp, log_append_time, base_sequence,\n"
"            timestamp_label, print_data, skip_record_metadata) -> str or None\n\n"
"kafka-dump-log's record lines (kcli.tools.dump_text.records_lines, magic 2) joined by newlines;\n"
"keys and payloads decoded as UTF-8 with replacement. None when a record needs the Python path.");

static PyObject *format_text(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count, label_len;
    long long base_offset, base_ts, max_ts, base_seq;
    int log_append, print_data, skip_meta;
    const char *label;
    if (!PyArg_ParseTuple(args, "y*nLLLpLy#pp", &view, &count, &base_offset, &base_ts, &max_ts, &log_append,
                          &base_seq, &label, &label_len, &print_data, &skip_meta))
        return NULL;
    BatchInfo bi = {base_offset, base_ts, max_ts, base_seq, log_append};
    const uchar *p = view.buf, *end = p + view.len;
    Out o = {NULL, 0, 0};
    Rec r;
    if (count <= 0) goto none;
    size_t fixed = (size_t)label_len + 200;
    size_t guess = (size_t)(count < view.len / 7 ? count : view.len / 7 + 1);
    if (out_grow(&o, (size_t)view.len + guess * fixed) < 0) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (parse_record(&p, end, &bi, &r) < 0) goto none;
        RESERVE(&o, fixed);
        if (i) putc_(&o, '\n');
        int has_data = print_data && (r.key_len >= 0 || r.value_len >= 0);
        if (skip_meta) {
            if (has_data) put(&o, "| ", 2);
        } else {
            put(&o, "| offset: ", 10);
            put_i64(&o, r.offset);
            putc_(&o, ' ');
            put(&o, label, label_len);
            put(&o, ": ", 2);
            put_i64(&o, r.timestamp);
            put(&o, " keySize: ", 10);
            put_i64(&o, r.key_len);
            put(&o, " valueSize: ", 12);
            put_i64(&o, r.value_len);
            put(&o, " sequence: ", 11);
            put_i64(&o, sequence_of(&bi, r.offset_delta));
            put(&o, " headerKeys: [", 14);
            const uchar *h = r.headers;
            for (int64_t j = 0; j < r.header_count; j++) {
                int64_t n = 0;
                read_varint(&h, r.record_end, &n);
                if (!utf8_valid(h, (size_t)n)) goto none;
                RESERVE(&o, (size_t)n + 2);
                if (j) putc_(&o, ',');
                put(&o, h, (size_t)n);
                h += n;
                read_varint(&h, r.record_end, &n);
                if (n > 0) h += n;
            }
            RESERVE(&o, 2);
            putc_(&o, ']');
            if (has_data) putc_(&o, ' ');
        }
        if (has_data) {
            if (r.key_len >= 0) {
                RESERVE(&o, 5);
                put(&o, "key: ", 5);
                if (text_replace(&o, r.key, (size_t)r.key_len) < 0) goto fail;
            }
            if (r.value_len >= 0) {
                RESERVE(&o, 10);
                if (r.key_len >= 0) putc_(&o, ' ');
                put(&o, "payload: ", 9);
                if (text_replace(&o, r.value, (size_t)r.value_len) < 0) goto fail;
            }
        }
    }
    PyBuffer_Release(&view);
    return finish(&o);
none:
    PyBuffer_Release(&view);
    return give_up(&o);
fail:
    PyBuffer_Release(&view);
    PyMem_Free(o.buf);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"format_json", format_json, METH_VARARGS, format_json_doc},
    {"format_text", format_text, METH_VARARGS, format_text_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dumpfmt",
    "Bulk formatting of v2 record payloads for kctl dump-log (optional; kcli/tools/dump_json.py and dump_text.py "
    "hold the reference).", -1, methods,
};

PyMODINIT_FUNC PyInit__dumpfmt(void) { return PyModule_Create(&module); }
