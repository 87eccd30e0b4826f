/* decode_columns: the records of one v2 record batch into RecordColumns' buffers, in C.
 *
 * Theory of operation
 * -------------------
 * ``RecordColumns._parse`` (record_columns.py) is the reference: it decodes a batch's
 * records into Arrow-shaped buffers (key and value bytes, int32 running ends, validity
 * bytes, int64 timestamp deltas) and raises the reference decoder's ProtocolError on
 * malformed input. Here the same batch is decoded in two passes over the bytes:
 *
 * 1. Check and measure. Every read is bounded by the buffer; every check of the Python loop
 *    is made, in its order. Anything not plainly well formed -- a check that fails, a read
 *    past the buffer, a varint of 10 bytes (its value may not fit 64 bits), an offset or
 *    running end that would overflow, a header key that is not UTF-8 -- returns None
 *    before anything is written: the caller then runs the Python loop, which raises the
 *    reference's error (or decodes the odd but valid encoding) itself. So the errors are
 *    always the Python loop's, and this code only has to get well-formed batches right.
 * 2. Write. The byte buffers grow once each; key and value bytes are copied with memcpy;
 *    the running ends and timestamp deltas are written to scratch memory and appended to
 *    their ``array`` objects with one ``frombytes`` call each.
 *
 * The write pointers point into the caller's bytearrays, so those must not move between
 * one ``grow`` and the last memcpy: a batch whose buffers are not seven distinct objects
 * (growing one would move the memory of its alias) or whose bytearrays are exported (a
 * resize would fail half-way) goes to the Python loop too. All arithmetic on values from
 * the input is checked (no signed overflow: the sanitizer tests build this file with
 * -fsanitize=undefined).
 *
 * Headers are checked and skipped (the caller keeps headers only through the Python loop).
 * tests/protocol/test_record_columns.py runs generated, mutated and random batches through
 * both and compares every buffer, run and error.
 */
#include "_decode.h"

#include <stdint.h>
#include <string.h>

/* A zigzag varint at *pos, at most 9 bytes (so it fits 64 bits); -1 when it runs past
 * ``len`` or is longer (the Python loop then decides). */
static inline int
read_varint(const unsigned char *d, Py_ssize_t len, Py_ssize_t *pos, int64_t *out)
{
    uint64_t z = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= len || shift > 56) {
            return -1;
        }
        unsigned char b = d[p++];
        z |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            break;
        }
        shift += 7;
    }
    *pos = p;
    *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    return 0;
}

/* Checks and skips a record's headers at *pos as record_reader._parse_headers reads them;
 * -1 where that would raise. */
static int
skip_headers(const unsigned char *d, Py_ssize_t len, Py_ssize_t *pos, Py_ssize_t rec_end)
{
    int64_t count, n;
    Py_ssize_t p = *pos;
    if (read_varint(d, len, &p, &count) < 0 || count < 0 || count > rec_end - p) {
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        if (read_varint(d, len, &p, &n) < 0 || n < 0 || n > rec_end - p) {
            return -1;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)d + p, (Py_ssize_t)n, NULL);
        if (key == NULL) {
            PyErr_Clear();
            return -1;
        }
        Py_DECREF(key);
        p += (Py_ssize_t)n;
        if (read_varint(d, len, &p, &n) < 0) {
            return -1;
        }
        if (n >= 0) {
            if (n > rec_end - p) {
                return -1;
            }
            p += (Py_ssize_t)n;
        } else if (n != -1) {
            return -1;
        }
    }
    *pos = p;
    return 0;
}

/* One record's fields, from pass 1 to pass 2. */
typedef struct {
    int64_t offset, ts_delta;
    Py_ssize_t key_at, key_len, value_at, value_len; /* len -1: null */
} Rec;

/* The window [low, high), each end possibly beyond int64 (then open on that side). */
typedef struct {
    int64_t low, high;
    int no_low, no_high, empty;
} Window;

static int
window_of(PyObject *low, PyObject *high, Window *w)
{
    int over;
    w->no_low = w->no_high = w->empty = 0;
    w->low = PyLong_AsLongLongAndOverflow(low, &over);
    if (w->low == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (over < 0) {
        w->no_low = 1;
    } else if (over > 0) {
        w->empty = 1;
    }
    w->high = PyLong_AsLongLongAndOverflow(high, &over);
    if (w->high == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (over > 0) {
        w->no_high = 1;
    } else if (over < 0) {
        w->empty = 1;
    }
    return 0;
}

static inline int
in_window(const Window *w, int64_t offset)
{
    return !w->empty && (w->no_low || offset >= w->low) && (w->no_high || offset < w->high);
}

static int
append_array(PyObject *arr, const void *data, Py_ssize_t size)
{
    PyObject *r = PyObject_CallMethod(arr, "frombytes", "y#", (const char *)data, size);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

static int
grow(PyObject *buf, Py_ssize_t more, char **at)
{
    Py_ssize_t used = PyByteArray_GET_SIZE(buf), size;
    if (__builtin_add_overflow(used, more, &size)) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyByteArray_Resize(buf, size) < 0) {
        return -1;
    }
    *at = PyByteArray_AS_STRING(buf) + used;
    return 0;
}

/* Whether the buffers can be written as pass 2 does: seven distinct objects, none of them
 * the input, no bytearray exported (see the theory of operation). */
static int
writable(PyObject *data, PyObject *buffers)
{
    for (int i = 0; i < 7; i++) {
        PyObject *b = PyTuple_GET_ITEM(buffers, i);
        if (b == data || (i < 4 && ((PyByteArrayObject *)b)->ob_exports > 0)) {
            return 0;
        }
        for (int j = 0; j < i; j++) {
            if (PyTuple_GET_ITEM(buffers, j) == b) {
                return 0;
            }
        }
    }
    return 1;
}

PyObject *
decode_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "decode_columns() takes 12 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Rec *recs = NULL;
    int32_t *key_ends = NULL, *value_ends = NULL;
    int64_t *deltas = NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    int over, count_over, base_over;
    long long count = PyLong_AsLongLongAndOverflow(args[3], &count_over);
    long long base_offset = PyLong_AsLongLongAndOverflow(args[4], &base_over);
    int log_append = PyObject_IsTrue(args[5]);
    Window w;
    Py_ssize_t index = PyLong_AsSsize_t(args[8]);
    long long next_offset = PyLong_AsLongLongAndOverflow(args[9], &over);
    PyObject *offset_runs = args[10];
    PyObject *buffers = args[11];
    if (PyErr_Occurred() || log_append < 0 || window_of(args[6], args[7], &w) < 0) {
        goto done;
    }
    if (!PyList_Check(offset_runs) || !PyTuple_Check(buffers) || PyTuple_GET_SIZE(buffers) != 7) {
        PyErr_SetString(PyExc_TypeError, "decode_columns: offset_runs list, 7 buffers");
        goto done;
    }
    PyObject *keys = PyTuple_GET_ITEM(buffers, 0), *values = PyTuple_GET_ITEM(buffers, 1);
    PyObject *key_valid = PyTuple_GET_ITEM(buffers, 2), *value_valid = PyTuple_GET_ITEM(buffers, 3);
    for (int i = 0; i < 4; i++) {
        if (!PyByteArray_CheckExact(PyTuple_GET_ITEM(buffers, i))) {
            PyErr_SetString(PyExc_TypeError, "decode_columns: data and validity are bytearrays");
            goto done;
        }
    }
    /* A record takes at least 7 bytes (a length of at least 6, and its varint): a count
     * the region cannot hold is malformed, and is not allocated for. */
    if (over || count_over || base_over || count < 0 || pos < 0 || end > len || pos > end ||
        count > (end - pos) / 7 || !writable(args[0], buffers)) {
        goto fallback;
    }
    /* Pass 1: check and measure (see the theory of operation). */
    recs = PyMem_Malloc(sizeof(Rec) * (size_t)(count ? count : 1));
    if (recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t added = 0, key_bytes = 0, value_bytes = 0;
    for (long long i = 0; i < count; i++) {
        int64_t length, off_delta;
        Rec *r = &recs[added];
        if (read_varint(d, len, &pos, &length) < 0 || length < 6 || length > end - pos) {
            goto fallback;
        }
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        if (read_varint(d, len, &pos, &r->ts_delta) < 0 ||
            read_varint(d, len, &pos, &off_delta) < 0) {
            goto fallback;
        }
        int64_t n;
        if (read_varint(d, len, &pos, &n) < 0 || n < -1 || n > len - pos) {
            goto fallback;
        }
        r->key_at = pos;
        r->key_len = (Py_ssize_t)n;
        if (n > 0) {
            pos += (Py_ssize_t)n;
        }
        if (read_varint(d, len, &pos, &n) < 0 || n < -1 || n > len - pos) {
            goto fallback;
        }
        r->value_at = pos;
        r->value_len = (Py_ssize_t)n;
        if (n > 0) {
            pos += (Py_ssize_t)n;
        }
        if (pos >= len) {
            goto fallback;
        }
        if (d[pos] == 0) {
            pos += 1;
        } else if (skip_headers(d, len, &pos, rec_end) < 0) {
            goto fallback;
        }
        if (pos != rec_end || __builtin_add_overflow(base_offset, off_delta, &r->offset)) {
            goto fallback;
        }
        if (!in_window(&w, r->offset)) {
            continue;
        }
        if (r->offset == INT64_MAX) {
            goto fallback; /* the next offset, 2**63, is past int64: Python's to keep */
        }
        /* Each key and value lies inside the buffer, so the sums cannot pass ``len``. */
        key_bytes += r->key_len > 0 ? r->key_len : 0;
        value_bytes += r->value_len > 0 ? r->value_len : 0;
        added++;
    }
    if (pos != end) {
        goto fallback;
    }
    Py_ssize_t key_base = PyByteArray_GET_SIZE(keys), value_base = PyByteArray_GET_SIZE(values);
    if (key_bytes > INT32_MAX - key_base || value_bytes > INT32_MAX - value_base) {
        goto fallback; /* the int32 ends would overflow: the Python loop raises */
    }
    /* Pass 2: write. */
    char *kw, *vw, *kv, *vv;
    key_ends = PyMem_Malloc(sizeof(int32_t) * (size_t)(added ? added : 1));
    value_ends = PyMem_Malloc(sizeof(int32_t) * (size_t)(added ? added : 1));
    deltas = PyMem_Malloc(sizeof(int64_t) * (size_t)(added ? added : 1));
    if (!key_ends || !value_ends || !deltas) {
        PyErr_NoMemory();
        goto done;
    }
    if (grow(keys, key_bytes, &kw) < 0 || grow(values, value_bytes, &vw) < 0 ||
        grow(key_valid, added, &kv) < 0 || grow(value_valid, added, &vv) < 0) {
        goto done;
    }
    /* The copy loop calls no Python API: nothing can run that might move the buffers. */
    Py_ssize_t kend = key_base, vend = value_base, key_nulls = 0, value_nulls = 0;
    for (Py_ssize_t k = 0; k < added; k++) {
        const Rec *r = &recs[k];
        deltas[k] = log_append ? 0 : r->ts_delta;
        if (r->key_len >= 0) {
            memcpy(kw, d + r->key_at, (size_t)r->key_len);
            kw += r->key_len;
            kend += r->key_len;
        } else {
            key_nulls++;
        }
        kv[k] = r->key_len >= 0;
        key_ends[k] = (int32_t)kend;
        if (r->value_len >= 0) {
            memcpy(vw, d + r->value_at, (size_t)r->value_len);
            vw += r->value_len;
            vend += r->value_len;
        } else {
            value_nulls++;
        }
        vv[k] = r->value_len >= 0;
        value_ends[k] = (int32_t)vend;
    }
    for (Py_ssize_t k = 0; k < added; k++) {
        const Rec *r = &recs[k];
        if (r->offset != next_offset) {
            PyObject *at = PyLong_FromSsize_t(index + k);
            PyObject *off = PyLong_FromLongLong(r->offset);
            int failed = !at || !off || PyList_Append(offset_runs, at) < 0 ||
                         PyList_Append(offset_runs, off) < 0;
            Py_XDECREF(at);
            Py_XDECREF(off);
            if (failed) {
                goto done;
            }
        }
        next_offset = r->offset + 1; /* < INT64_MAX: checked in pass 1 */
    }
    if (append_array(PyTuple_GET_ITEM(buffers, 4), key_ends, added * 4) < 0 ||
        append_array(PyTuple_GET_ITEM(buffers, 5), value_ends, added * 4) < 0 ||
        append_array(PyTuple_GET_ITEM(buffers, 6), deltas, added * 8) < 0) {
        goto done;
    }
    result = Py_BuildValue("(nLnn)", added, next_offset, key_nulls, value_nulls);
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(recs);
    PyMem_Free(key_ends);
    PyMem_Free(value_ends);
    PyMem_Free(deltas);
    PyBuffer_Release(&view);
    return result;
}
