/* The byte-copying loops of the producer's bulk path, in C.
 *
 * Theory of operation
 * -------------------
 * mypyc compiles ``records.py`` and ``runs.py`` (see docs/internals.md), but a record still
 * costs a joined ``bytes`` object, a tuple of its parts and a bytearray append there: about
 * 150 ns per 100-byte record in ``RecordBatchBuilder.append_run``, the largest share of a
 * bulk send. Here the same records are measured in one pass, the batch's bytearray is grown
 * once, and each record is written in place with memcpy: no object per record.
 *
 * The ``.py`` files stay the reference: ``records.py`` and ``runs.py`` call these functions
 * when this module imports and run their own loops when it does not (no compiler, or
 * ``AIOKAFKA_NG_PURE_PYTHON=1``); tests/protocol/test_speedups.py holds every function here
 * to its Python twin byte for byte, result for result and error for error.
 *
 * A run's keys and values are either lists (items ``bytes`` or ``None``) or ``BinaryColumn``
 * objects (``_column.c``): the buffers of an Arrow binary column read in place, so a Spark
 * write task encodes record batches straight from its Arrow columns without an object per
 * record.
 *
 * Nothing here releases the GIL or calls back into Python while it reads a list, so the
 * borrowed items stay valid between the measuring and the writing pass.
 *
 * Record layout (magic v2), every length a zigzag varint:
 *   length | attributes (0) | timestampDelta | offsetDelta | keyLength | key
 *          | valueLength | value | headers
 * A null key or value is length -1 (zigzag 1) and no bytes. ``headers`` is given already
 * encoded (headerCount and the headers): a single 0 byte for none, and in a run the same
 * bytes for every record (a traced bulk call's trace context).
 */
#include "_column.h"
#include "_decode.h"
#include "../producer/_send.h"

#include <string.h>

/* ------------------------------------------------------------------------------ varints */

static inline int
varint_size(uint64_t z)
{
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline char *
put_varint(char *p, uint64_t z)
{
    while (z >= 0x80) {
        *p++ = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (char)z;
    return p;
}

/* zigzag of a non-negative length or delta */
#define ZZ(x) (((uint64_t)(x)) << 1)

/* ------------------------------------------------------------------ runs of items */

/* Keys or values of a run: a list, a BinaryColumn, or absent (all null). */
typedef struct {
    PyObject *list;
    BinaryColumn *col;
    Py_ssize_t len;
} Items;

static int
items_init(Items *it, PyObject *obj, const char *what, int optional)
{
    it->list = NULL;
    it->col = NULL;
    it->len = 0;
    if (obj == Py_None && optional) {
        return 0;
    }
    if (PyList_Check(obj)) {
        it->list = obj;
        it->len = PyList_GET_SIZE(obj);
        return 0;
    }
    if (Py_IS_TYPE(obj, &BinaryColumnType)) {
        it->col = (BinaryColumn *)obj;
        it->len = it->col->length;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s must be a list or a BinaryColumn%s, not %.100s", what,
                 optional ? " or None" : "", Py_TYPE(obj)->tp_name);
    return -1;
}

/* A key or value given alone: bytes, or None (*n = -1). */
static inline int
field_of(PyObject *o, const char **p, Py_ssize_t *n, const char *what)
{
    if (o == Py_None) {
        *p = NULL;
        *n = -1;
        return 0;
    }
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *p = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 0;
}

/* Item i: *n = -1 for null. -1 (TypeError set) when a list item is neither bytes nor None. */
static inline int
items_get(const Items *it, Py_ssize_t i, const char **p, Py_ssize_t *n, const char *what)
{
    if (it->col) {
        col_item(it->col, i, p, n);
        return 0;
    }
    if (it->list == NULL) {
        *p = NULL;
        *n = -1;
        return 0;
    }
    return field_of(PyList_GET_ITEM(it->list, i), p, n, what);
}

static inline uint64_t
field_size(Py_ssize_t n)
{
    return n < 0 ? 1 : (uint64_t)varint_size(ZZ(n)) + (uint64_t)n;
}

static inline char *
put_field(char *w, const char *p, Py_ssize_t n)
{
    if (n < 0) {
        *w++ = 0x01;
        return w;
    }
    w = put_varint(w, ZZ(n));
    memcpy(w, p, (size_t)n);
    return w + n;
}

/* The arguments both appends begin with: (buf, limit, ts_enc, delta). */
typedef struct {
    PyObject *buf; /* a bytearray */
    Py_ssize_t limit;
    const char *ts; /* the timestamp delta, a varint already */
    Py_ssize_t ts_len;
    uint64_t delta; /* the first record's offset delta */
} Head;

static int
parse_head(PyObject *const *args, const char *fn, Head *h)
{
    if (!PyByteArray_CheckExact(args[0]) || !PyBytes_Check(args[2])) {
        PyErr_Format(PyExc_TypeError, "%s: buf must be a bytearray, ts_enc bytes", fn);
        return -1;
    }
    h->buf = args[0];
    h->limit = PyLong_AsSsize_t(args[1]);
    long long delta = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (delta < 0) {
        PyErr_Format(PyExc_ValueError, "%s: negative offset delta", fn);
        return -1;
    }
    h->ts = PyBytes_AS_STRING(args[2]);
    h->ts_len = PyBytes_GET_SIZE(args[2]);
    h->delta = (uint64_t)delta;
    return 0;
}

/* A run's records, as append_run reads them. */
typedef struct {
    Items keys, values;
    const char *ts; /* the timestamp delta, a varint already */
    Py_ssize_t ts_len;
    const char *hs; /* the headers every record ends with, encoded */
    uint64_t delta; /* the first record's offset delta */
} Run;

/* The two passes of append_run, for headers ``hs_len`` bytes long. Always inlined and
 * called with the literal 1 for a run without headers (the one 0 byte: tracing off, the
 * common case), so that run compiles to the loops it had before runs carried headers: no
 * work per record for headers it does not have. */

/* Pass 1: how many of records [start, stop) fit in ``room`` bytes (returned; -1 with an
 * error set when an item is neither bytes nor None), and their bytes (*total). */
static inline Py_ALWAYS_INLINE Py_ssize_t
run_measure(const Run *r, uint64_t hs_len, Py_ssize_t start, Py_ssize_t stop, uint64_t room,
            uint64_t *total)
{
    uint64_t sum = 0;
    uint64_t delta = r->delta;
    Py_ssize_t i = start;
    for (; i < stop; i++, delta++) {
        const char *kp, *vp;
        Py_ssize_t kn, vn;
        if (items_get(&r->keys, i, &kp, &kn, "key") < 0 ||
            items_get(&r->values, i, &vp, &vn, "value") < 0) {
            return -1;
        }
        uint64_t body = 1 + (uint64_t)r->ts_len + (uint64_t)varint_size(ZZ(delta)) +
                        field_size(kn) + field_size(vn) + hs_len;
        uint64_t size = (uint64_t)varint_size(ZZ(body)) + body;
        if (sum + size > room) {
            break;
        }
        sum += size;
    }
    *total = sum;
    return i;
}

/* Pass 2: write records [start, end) at ``w`` (room made by pass 1). -1 with an error set
 * when an item cannot be read (see the caller). */
static inline Py_ALWAYS_INLINE int
run_write(const Run *r, uint64_t hs_len, char *w, Py_ssize_t start, Py_ssize_t end)
{
    uint64_t delta = r->delta;
    for (Py_ssize_t i = start; i < end; i++, delta++) {
        const char *kp, *vp;
        Py_ssize_t kn, vn;
        if (items_get(&r->keys, i, &kp, &kn, "key") < 0 ||
            items_get(&r->values, i, &vp, &vn, "value") < 0) {
            return -1;
        }
        uint64_t zd = ZZ(delta);
        uint64_t body = 1 + (uint64_t)r->ts_len + (uint64_t)varint_size(zd) + field_size(kn) +
                        field_size(vn) + hs_len;
        w = put_varint(w, ZZ(body));
        *w++ = 0; /* attributes */
        memcpy(w, r->ts, (size_t)r->ts_len);
        w += r->ts_len;
        w = put_varint(w, zd);
        w = put_field(w, kp, kn);
        w = put_field(w, vp, vn);
        if (hs_len == 1) {
            *w++ = r->hs[0]; /* no headers: their count, 0 */
        } else {
            memcpy(w, r->hs, (size_t)hs_len);
            w += hs_len;
        }
    }
    return 0;
}

/* append_run(buf, limit, ts_enc, delta, keys, values, start, stop, headers_enc) -> int
 *
 * Append records values[start:stop] (keys alike, or null keys) to the bytearray ``buf``,
 * offset deltas from ``delta``, timestamp delta ``ts_enc`` (already a varint), each ending
 * with the same ``headers_enc`` (b"\x00": no headers), until the next record would take
 * ``len(buf)`` past ``limit``. Returns the index of the first record not appended.
 * ``RecordBatchBuilder.append_run`` is the twin. ``headers_enc`` is an immutable bytes
 * object the caller holds for the call; nothing of it is kept after. */
static PyObject *
append_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "append_run() takes 9 arguments");
        return NULL;
    }
    Head h;
    if (parse_head(args, "append_run", &h) < 0) {
        return NULL;
    }
    if (!PyBytes_Check(args[8]) || PyBytes_GET_SIZE(args[8]) < 1) {
        PyErr_SetString(PyExc_TypeError, "append_run: headers_enc must be non-empty bytes");
        return NULL;
    }
    Run r;
    r.ts = h.ts;
    r.ts_len = h.ts_len;
    r.delta = h.delta;
    r.hs = PyBytes_AS_STRING(args[8]);
    uint64_t hs_len = (uint64_t)PyBytes_GET_SIZE(args[8]);
    PyObject *buf = h.buf;
    if (items_init(&r.keys, args[4], "keys", 1) < 0 ||
        items_init(&r.values, args[5], "values", 0) < 0) {
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[6]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0 || stop > r.values.len ||
        ((r.keys.list || r.keys.col) && stop > r.keys.len)) {
        PyErr_SetString(PyExc_IndexError, "append_run: run bounds outside the items");
        return NULL;
    }
    Py_ssize_t used = PyByteArray_GET_SIZE(buf);
    uint64_t total = 0;
    uint64_t room = h.limit > used ? (uint64_t)(h.limit - used) : 0;
    Py_ssize_t end = hs_len == 1 ? run_measure(&r, 1, start, stop, room, &total)
                                 : run_measure(&r, hs_len, start, stop, room, &total);
    if (end < 0) {
        return NULL;
    }
    if (end == start) {
        return PyLong_FromSsize_t(end);
    }
    if (PyByteArray_Resize(buf, used + (Py_ssize_t)total) < 0) {
        return NULL;
    }
    char *w = PyByteArray_AS_STRING(buf) + used;
    if ((hs_len == 1 ? run_write(&r, 1, w, start, end) : run_write(&r, hs_len, w, start, end)) <
        0) {
        /* Pass 1 read these very items and no Python code ran since, so this does not
         * happen; if it did, the bytes written so far and the room reserved for the rest
         * go, and buf is as it was (a shrink does not fail). */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        (void)PyByteArray_Resize(buf, used);
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    return PyLong_FromSsize_t(end);
}

/* append_record(buf, limit, ts_enc, delta, key, value, headers_enc) -> bool
 *
 * Append one record (offset delta ``delta``, timestamp delta ``ts_enc`` and headers
 * ``headers_enc`` already encoded) to the bytearray ``buf``. With ``limit`` >= 0 the record
 * is refused (False, nothing written) when it would take ``len(buf)`` past it.
 * ``RecordBatchBuilder.append`` is the twin. */
static PyObject *
append_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "append_record() takes 7 arguments");
        return NULL;
    }
    Head h;
    if (parse_head(args, "append_record", &h) < 0) {
        return NULL;
    }
    if (!PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "append_record: headers_enc must be bytes");
        return NULL;
    }
    PyObject *buf = h.buf;
    Py_ssize_t limit = h.limit;
    const char *ts = h.ts;
    Py_ssize_t ts_len = h.ts_len;
    const char *hs = PyBytes_AS_STRING(args[6]);
    Py_ssize_t hs_len = PyBytes_GET_SIZE(args[6]);
    const char *kp, *vp;
    Py_ssize_t kn, vn;
    if (field_of(args[4], &kp, &kn, "key") < 0 || field_of(args[5], &vp, &vn, "value") < 0) {
        return NULL;
    }
    uint64_t zd = ZZ(h.delta);
    uint64_t body = 1 + (uint64_t)ts_len + (uint64_t)varint_size(zd) + field_size(kn) +
                    field_size(vn) + (uint64_t)hs_len;
    uint64_t size = (uint64_t)varint_size(ZZ(body)) + body;
    Py_ssize_t used = PyByteArray_GET_SIZE(buf);
    if (limit >= 0 && (limit < used || size > (uint64_t)(limit - used))) {
        Py_RETURN_FALSE;
    }
    if (size > (uint64_t)(PY_SSIZE_T_MAX - used)) {
        return PyErr_NoMemory();
    }
    if (PyByteArray_Resize(buf, used + (Py_ssize_t)size) < 0) {
        return NULL;
    }
    char *w = PyByteArray_AS_STRING(buf) + used;
    w = put_varint(w, ZZ(body));
    *w++ = 0; /* attributes */
    memcpy(w, ts, (size_t)ts_len);
    w += ts_len;
    w = put_varint(w, zd);
    w = put_field(w, kp, kn);
    w = put_field(w, vp, vn);
    memcpy(w, hs, (size_t)hs_len);
    Py_RETURN_TRUE;
}

/* size + n (n >= 0) by Python's +, stealing ``size``; NULL with an error set. */
static PyObject *
add_length(PyObject *size, Py_ssize_t n)
{
    if (size == NULL || n < 0) {
        return size;
    }
    PyObject *len = PyLong_FromSsize_t(n);
    PyObject *sum = len == NULL ? NULL : PyNumber_Add(size, len);
    Py_XDECREF(len);
    Py_DECREF(size);
    return sum;
}

/* record_sizes(values, keys, overhead) -> list[int] | None: ``overhead`` plus each record's
 * key and value lengths; None when a list item is neither bytes nor None.
 *
 * The sum is computed in int64 when ``overhead`` is an int that fits and no sum overflows
 * (checked: no signed overflow); otherwise by Python's ``+`` on the objects, in the pure
 * loop's order (``overhead``, then + the value's length, then + the key's), so that any
 * ``overhead`` gives what runs.record_sizes gives, errors included. */
static PyObject *
record_sizes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record_sizes() takes 3 arguments");
        return NULL;
    }
    Items values, keys;
    if (items_init(&values, args[0], "values", 0) < 0 || items_init(&keys, args[1], "keys", 1) < 0) {
        return NULL;
    }
    int generic = 1; /* overhead is not an int64: sums by Python's + */
    long long overhead = 0;
    if (PyLong_CheckExact(args[2])) {
        overhead = PyLong_AsLongLongAndOverflow(args[2], &generic);
        if (overhead == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    Py_ssize_t n = values.len;
    if ((keys.list || keys.col) && keys.len < n) {
        PyErr_SetString(PyExc_IndexError, "record_sizes: fewer keys than values");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *p;
        Py_ssize_t vn, kn;
        PyObject *size = NULL;
        if (items_get(&values, i, &p, &vn, "value") < 0) {
            goto not_bytes;
        }
        if (generic) { /* the pure loop adds the value's length before it checks the key */
            Py_INCREF(args[2]);
            if ((size = add_length(args[2], vn)) == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        if (items_get(&keys, i, &p, &kn, "key") < 0) {
            goto not_bytes;
        }
        long long total;
        if (size != NULL) {
            size = add_length(size, kn);
        } else if (!__builtin_add_overflow(overhead, vn > 0 ? vn : 0, &total) &&
                   !__builtin_add_overflow(total, kn > 0 ? kn : 0, &total)) {
            size = PyLong_FromLongLong(total);
        } else {
            Py_INCREF(args[2]);
            size = add_length(add_length(args[2], vn), kn);
        }
        if (size == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, size);
        continue;
    not_bytes:
        Py_XDECREF(size);
        PyErr_Clear();
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* ------------------------------------------------------------------------- murmur2 */

/* Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed int32. */
int32_t
murmur2_raw(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)length;
    Py_ssize_t n4 = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < n4; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) { /* Java's switch falls through: 3 -> 2 -> 1 */
    case 3:
        h ^= (uint32_t)data[n4 + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[n4 + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[n4];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *
murmur2(PyObject *module, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "murmur2 wants bytes, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    return PyLong_FromLong(
        murmur2_raw((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
}

/* split_keyed(keys, values, sizes, num_partitions, positions) -> list
 *
 * Group a keyed run by default partition: entry ``p + 1`` of the result is None or
 * ``(where, keys, values, sizes)`` for partition p (entry 0: null keys, for the sticky
 * partition), run order kept. ``where`` holds ``positions[i]`` when positions is a list,
 * else the run indexes i. Keys and values come back as lists for lists, columns for
 * columns. ``runs.split_keyed_run`` is the twin (and wraps the entries). */
static PyObject *
split_keyed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "split_keyed() takes 5 arguments");
        return NULL;
    }
    Items keys, values;
    if (items_init(&keys, args[0], "keys", 0) < 0 || items_init(&values, args[1], "values", 0) < 0) {
        return NULL;
    }
    PyObject *sizes = args[2];
    PyObject *positions = args[4];
    if (!PyList_Check(sizes) || (positions != Py_None && !PyList_Check(positions))) {
        PyErr_SetString(PyExc_TypeError, "split_keyed: sizes (and positions) must be lists");
        return NULL;
    }
    Py_ssize_t parts = PyLong_AsSsize_t(args[3]);
    if (parts == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (parts <= 0) {
        PyErr_SetString(PyExc_ValueError, "split_keyed: no partitions");
        return NULL;
    }
    Py_ssize_t n = keys.len;
    if (values.len < n || PyList_GET_SIZE(sizes) < n ||
        (positions != Py_None && PyList_GET_SIZE(positions) < n)) {
        PyErr_SetString(PyExc_IndexError, "split_keyed: fewer values, sizes or positions than keys");
        return NULL;
    }
    Py_ssize_t slots = parts + 1;
    Py_ssize_t *slot = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    Py_ssize_t *count = PyMem_Calloc((size_t)slots, sizeof(Py_ssize_t));
    Py_ssize_t *order = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    Py_ssize_t *fill = PyMem_Calloc((size_t)slots, sizeof(Py_ssize_t));
    PyObject *out = NULL;
    if (!slot || !count || !order || !fill) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *p;
        Py_ssize_t kn;
        if (items_get(&keys, i, &p, &kn, "key") < 0) {
            goto done;
        }
        Py_ssize_t s = 0;
        if (kn >= 0) {
            uint32_t h = (uint32_t)murmur2_raw((const unsigned char *)p, kn) & 0x7fffffffU;
            s = (Py_ssize_t)(h % (uint64_t)parts) + 1;
        }
        slot[i] = s;
        count[s]++;
    }
    /* Counting sort by slot: ``order`` lists each slot's run indexes, in run order. */
    Py_ssize_t acc = 0;
    for (Py_ssize_t s = 0; s < slots; s++) {
        fill[s] = acc;
        acc += count[s];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        order[fill[slot[i]]++] = i;
    }
    out = PyList_New(slots);
    if (out == NULL) {
        goto done;
    }
    Py_ssize_t base = 0;
    for (Py_ssize_t s = 0; s < slots; s++) {
        Py_ssize_t c = count[s];
        const Py_ssize_t *idx = order + base;
        base += c;
        if (c == 0) {
            Py_INCREF(Py_None);
            PyList_SET_ITEM(out, s, Py_None);
            continue;
        }
        PyObject *where = PyList_New(c);
        PyObject *ks = NULL, *vs = NULL;
        PyObject *ss = PyList_New(c);
        if (where == NULL || ss == NULL) {
            Py_XDECREF(where);
            Py_XDECREF(ss);
            Py_CLEAR(out);
            goto done;
        }
        for (Py_ssize_t k = 0; k < c; k++) {
            Py_ssize_t i = idx[k];
            PyObject *w;
            if (positions != Py_None) {
                w = PyList_GET_ITEM(positions, i);
                Py_INCREF(w);
            } else {
                w = PyLong_FromSsize_t(i);
                if (w == NULL) {
                    Py_DECREF(where);
                    Py_DECREF(ss);
                    Py_CLEAR(out);
                    goto done;
                }
            }
            PyList_SET_ITEM(where, k, w);
            PyObject *size = PyList_GET_ITEM(sizes, i);
            Py_INCREF(size);
            PyList_SET_ITEM(ss, k, size);
        }
        for (int which = 0; which < 2; which++) {
            Items *src = which ? &values : &keys;
            PyObject *got;
            if (src->col) {
                got = column_take(src->col, idx, c);
            } else {
                got = PyList_New(c);
                if (got != NULL) {
                    for (Py_ssize_t k = 0; k < c; k++) {
                        PyObject *item = PyList_GET_ITEM(src->list, idx[k]);
                        Py_INCREF(item);
                        PyList_SET_ITEM(got, k, item);
                    }
                }
            }
            if (which) {
                vs = got;
            } else {
                ks = got;
            }
        }
        if (ks == NULL || vs == NULL) {
            Py_DECREF(where);
            Py_DECREF(ss);
            Py_XDECREF(ks);
            Py_XDECREF(vs);
            Py_CLEAR(out);
            goto done;
        }
        PyObject *entry = PyTuple_Pack(4, where, ks, vs, ss);
        Py_DECREF(where);
        Py_DECREF(ks);
        Py_DECREF(vs);
        Py_DECREF(ss);
        if (entry == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, s, entry);
    }
done:
    PyMem_Free(slot);
    PyMem_Free(count);
    PyMem_Free(order);
    PyMem_Free(fill);
    return out;
}

/* -------------------------------------------------------------------- GC tracking */

/* untrack(obj): take a GC object off the cyclic collector's lists. Only for an object that
 * cannot be part of a reference cycle (record_reader.ConsumerRecord as decoded, see its
 * _C_TRACK); track(obj) puts it back. Both do nothing for an object already in that state
 * (PyObject_GC_Track would abort on a tracked one) or not a GC object. */
static PyObject *
untrack(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    Py_RETURN_NONE;
}

static PyObject *
track(PyObject *module, PyObject *obj)
{
    if (PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj)) {
        PyObject_GC_Track(obj);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"append_run", (PyCFunction)(void (*)(void))append_run, METH_FASTCALL,
     "append_run(buf, limit, ts_enc, delta, keys, values, start, stop, headers_enc) -> int"},
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
     "append_record(buf, limit, ts_enc, delta, key, value, headers_enc) -> bool"},
    {"record_sizes", (PyCFunction)(void (*)(void))record_sizes, METH_FASTCALL,
     "record_sizes(values, keys, overhead) -> list[int] | None"},
    {"split_keyed", (PyCFunction)(void (*)(void))split_keyed, METH_FASTCALL,
     "split_keyed(keys, values, sizes, num_partitions, positions) -> list"},
    {"untrack", (PyCFunction)untrack, METH_O, "untrack(obj): off the cyclic GC's lists"},
    {"track", (PyCFunction)track, METH_O, "track(obj): back on the cyclic GC's lists"},
    {"murmur2", (PyCFunction)murmur2, METH_O, "murmur2(data: bytes) -> int (signed 32-bit)"},
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns, METH_FASTCALL,
     "decode_columns(data, pos, end, count, base_offset, log_append, low, high, index,"
     " next_offset, offset_runs, buffers) -> (added, next_offset, key_nulls, value_nulls)"
     " | None"},
    {"send_fast", (PyCFunction)(void (*)(void))send_fast, METH_FASTCALL,
     "send_fast(intake, topic, value, key, partition, timestamp_ms, headers)"
     " -> DeliveryFuture | None"},
    {"send_fast_setup", (PyCFunction)(void (*)(void))send_fast_setup, METH_FASTCALL,
     "send_fast_setup(Intake, ProducerEngine, Topic, PartitionQueue, ProducerBatch,"
     " DeliveryFuture, MemoryPool, record_overhead, pending) -> None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aiokafka_ng.protocol._speedups",
    .m_doc = "C loops for the producer's bulk path; records.py and runs.py are the twins.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (column_types_ready() < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&BinaryColumnType);
    if (PyModule_AddObject(m, "BinaryColumn", (PyObject *)&BinaryColumnType) < 0) {
        Py_DECREF(&BinaryColumnType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
