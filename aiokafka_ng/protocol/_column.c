/* BinaryColumn: the items of an Arrow binary (or large_binary) array, for the bulk path of
 * aiokafka_ng.protocol._speedups (see _speedups.c).
 *
 * A column is made from PEP 3118 buffers (what pyarrow's ``Array.buffers()`` gives: offsets,
 * data, optional validity bitmap) and an element offset and length, as Arrow slices them.
 *
 * Memory safety does not depend on the caller. The buffers may be writable (a bytearray,
 * an array, ``pa.py_buffer`` over a bytearray, most pyarrow arrays) and may change after the
 * column is made, so a column keeps nothing it reads positions from in the caller's memory:
 *
 * - its offsets and validity bits are copied, once, into memory of its own, and checked on
 *   that copy (every offset inside the data, none decreasing) -- a check on the caller's
 *   buffer would say nothing about what it holds a moment later;
 * - the data buffer is read in place through a view the column holds until its last slice
 *   is freed. A held view keeps the memory alive and of the same size (a bytearray, an
 *   array or an mmap refuses to resize or close while exported: BufferError), so any
 *   offset checked at construction stays inside it. The data's bytes may still change;
 *   then the items change with them, and never read outside the buffer.
 *
 * The copy costs 4 (8 for large_binary) bytes per item, about 1/25 of a column of 100-byte
 * items; docs/internals.md has the measurements. Slicing gives a view sharing the backing;
 * ``take()`` and ``copy()`` a column with memory of its own (``copy()`` is what the
 * producer keeps of a run it has not encoded yet when ``send_many`` returns).
 */
#include "_column.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    Py_buffer view; /* the data buffer's view, when ``has_view`` */
    int has_view;
    void *owned[3]; /* memory of its own: offsets, bitmap, data (copy/take) */
    int nowned;
} Backing;

static void
Backing_dealloc(Backing *self)
{
    if (self->has_view) {
        PyBuffer_Release(&self->view);
    }
    for (int i = 0; i < self->nowned; i++) {
        PyMem_Free(self->owned[i]);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject BackingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiokafka_ng.protocol._speedups._Backing",
    .tp_basicsize = sizeof(Backing),
    .tp_dealloc = (destructor)Backing_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = NULL,
};

static Backing *
backing_new(void)
{
    Backing *b = PyObject_New(Backing, &BackingType);
    if (b != NULL) {
        b->has_view = 0;
        b->nowned = 0;
    }
    return b;
}

/* ``size`` bytes (at least 1) owned by ``b``; NULL with MemoryError set. */
static void *
backing_alloc(Backing *b, size_t size, int zero)
{
    void *p = zero ? PyMem_Calloc(size ? size : 1, 1) : PyMem_Malloc(size ? size : 1);
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    b->owned[b->nowned++] = p;
    return p;
}

static BinaryColumn *
column_new(PyObject *backing, const char *data, const int32_t *off32, const int64_t *off64,
           const uint8_t *valid, Py_ssize_t vbit, Py_ssize_t length)
{
    BinaryColumn *c = PyObject_New(BinaryColumn, &BinaryColumnType);
    if (c == NULL) {
        return NULL;
    }
    Py_INCREF(backing);
    c->backing = backing;
    c->data = data;
    c->off32 = off32;
    c->off64 = off64;
    c->valid = valid;
    c->vbit = vbit;
    c->length = length;
    return c;
}

static PyObject *
BinaryColumn_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"offsets", "data", "validity", "offset", "length", "large", NULL};
    PyObject *offsets, *data, *validity = Py_None;
    Py_ssize_t offset = 0, length = -1;
    int large = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|Onnp", kwlist, &offsets, &data, &validity,
                                     &offset, &length, &large)) {
        return NULL;
    }
    Backing *b = backing_new();
    if (b == NULL) {
        return NULL;
    }
    BinaryColumn *c = NULL;
    /* The offsets and the bitmap are read only here (copied), the data for the column's
     * life: its view goes to the backing, the other two are released before returning. */
    Py_buffer ov, vv;
    int have_o = 0, have_v = 0;
    if (PyObject_GetBuffer(offsets, &ov, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    have_o = 1;
    static const char empty[1] = {0};
    const char *dp = empty;
    Py_ssize_t dlen = 0;
    if (data != Py_None) {
        if (PyObject_GetBuffer(data, &b->view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        b->has_view = 1;
        dlen = b->view.len;
        if (dlen > 0) { /* an empty export may point nowhere (NULL): keep ``empty`` */
            dp = (const char *)b->view.buf;
        }
    }
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &vv, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        have_v = 1;
    }
    Py_ssize_t width = large ? 8 : 4;
    Py_ssize_t entries = ov.len / width;
    if (offset < 0 || entries < 1 || offset > entries - 1) {
        PyErr_Format(PyExc_ValueError, "BinaryColumn: offset %zd outside %zd offsets", offset,
                     entries);
        goto done;
    }
    if (length < 0) {
        length = entries - 1 - offset;
    }
    if (length > entries - 1 - offset) {
        PyErr_Format(PyExc_ValueError, "BinaryColumn: %zd items need %zd offsets, %zd given",
                     length, offset + length + 1, entries);
        goto done;
    }
    if (have_v && vv.len < (offset + length + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "BinaryColumn: validity bitmap too short");
        goto done;
    }
    /* Copies first, checks on the copies: what is checked is what is read later. memcpy
     * also takes offsets at any alignment. */
    size_t obytes = (size_t)(length + 1) * (size_t)width;
    void *offs = backing_alloc(b, obytes, 0);
    if (offs == NULL) {
        goto done;
    }
    memcpy(offs, (const char *)ov.buf + offset * width, obytes);
    const uint8_t *vp = NULL;
    Py_ssize_t vbit = offset & 7;
    if (have_v) {
        size_t vbytes = (size_t)((vbit + length + 7) / 8);
        uint8_t *bits = backing_alloc(b, vbytes, 0);
        if (bits == NULL) {
            goto done;
        }
        if (vbytes > 0) { /* vv.buf may be NULL when it is empty */
            memcpy(bits, (const uint8_t *)vv.buf + (offset >> 3), vbytes);
        }
        vp = bits;
    }
    const int32_t *o32 = large ? NULL : (const int32_t *)offs;
    const int64_t *o64 = large ? (const int64_t *)offs : NULL;
    int64_t prev = large ? o64[0] : o32[0];
    if (prev < 0 || prev > dlen) {
        PyErr_SetString(PyExc_ValueError, "BinaryColumn: an offset lies outside the data");
        goto done;
    }
    for (Py_ssize_t j = 1; j <= length; j++) {
        int64_t o = large ? o64[j] : o32[j];
        if (o < prev || o > dlen) {
            PyErr_SetString(PyExc_ValueError,
                            "BinaryColumn: offsets decrease or lie outside the data");
            goto done;
        }
        prev = o;
    }
    c = column_new((PyObject *)b, dp, o32, o64, vp, vbit, length);
done:
    if (have_o) {
        PyBuffer_Release(&ov);
    }
    if (have_v) {
        PyBuffer_Release(&vv);
    }
    Py_DECREF(b);
    return (PyObject *)c;
}

static void
BinaryColumn_dealloc(BinaryColumn *self)
{
    Py_XDECREF(self->backing);
    PyObject_Free(self);
}

static Py_ssize_t
BinaryColumn_len(BinaryColumn *self)
{
    return self->length;
}

static PyObject *
BinaryColumn_item(BinaryColumn *self, Py_ssize_t i)
{
    if (i < 0 || i >= self->length) {
        PyErr_SetString(PyExc_IndexError, "BinaryColumn index out of range");
        return NULL;
    }
    const char *p;
    Py_ssize_t n;
    col_item(self, i, &p, &n);
    if (n < 0) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize(p, n);
}

static PyObject *
BinaryColumn_subscript(BinaryColumn *self, PyObject *key)
{
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0) {
            return NULL;
        }
        Py_ssize_t n = PySlice_AdjustIndices(self->length, &start, &stop, step);
        if (step != 1) {
            PyErr_SetString(PyExc_ValueError, "BinaryColumn slices take no step");
            return NULL;
        }
        /* No pointer arithmetic on the absent one of off32/off64 (NULL + n is undefined). */
        return (PyObject *)column_new(self->backing, self->data,
                                      self->off32 ? self->off32 + start : NULL,
                                      self->off64 ? self->off64 + start : NULL, self->valid,
                                      self->vbit + start, n);
    }
    Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (i < 0) {
        i += self->length;
    }
    return BinaryColumn_item(self, i);
}

/* The items at ``indices`` (ints, in order) as a new column with memory of its own. */
PyObject *
column_take(BinaryColumn *self, const Py_ssize_t *idx, Py_ssize_t n)
{
    int64_t total = 0;
    int any_null = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *p;
        Py_ssize_t len;
        col_item(self, idx[k], &p, &len);
        if (len < 0) {
            any_null = 1;
        } else {
            total += len;
        }
    }
    Backing *b = backing_new();
    if (b == NULL) {
        return NULL;
    }
    char *data = backing_alloc(b, (size_t)total, 0);
    int64_t *offs = data ? backing_alloc(b, sizeof(int64_t) * (size_t)(n + 1), 0) : NULL;
    uint8_t *valid = NULL;
    if (offs && any_null) {
        valid = backing_alloc(b, (size_t)(n + 7) / 8, 1);
    }
    if (!offs || (any_null && !valid)) {
        Py_DECREF(b);
        return NULL;
    }
    int64_t pos = 0;
    offs[0] = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *p;
        Py_ssize_t len;
        col_item(self, idx[k], &p, &len);
        if (len >= 0) {
            memcpy(data + pos, p, (size_t)len);
            pos += len;
            if (valid) {
                valid[k >> 3] |= (uint8_t)(1 << (k & 7));
            }
        }
        offs[k + 1] = pos;
    }
    PyObject *c = (PyObject *)column_new((PyObject *)b, data, NULL, offs, valid, 0, n);
    Py_DECREF(b);
    return c;
}

/* copy(): the same items with memory of their own -- the bytes the items span now, one
 * memcpy, and offsets rebased to them -- so later changes to the data buffer the column
 * was made from do not reach it. */
static PyObject *
BinaryColumn_copy(BinaryColumn *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = self->length;
    int64_t base = COL_OFF(self, 0);
    int64_t span = COL_OFF(self, n) - base;
    Backing *b = backing_new();
    if (b == NULL) {
        return NULL;
    }
    char *data = backing_alloc(b, (size_t)span, 0);
    int64_t *offs = data ? backing_alloc(b, sizeof(int64_t) * (size_t)(n + 1), 0) : NULL;
    uint8_t *valid = NULL;
    if (offs && self->valid) {
        valid = backing_alloc(b, (size_t)(n + 7) / 8, 1);
    }
    if (!offs || (self->valid && !valid)) {
        Py_DECREF(b);
        return NULL;
    }
    memcpy(data, self->data + base, (size_t)span);
    for (Py_ssize_t i = 0; i <= n; i++) {
        offs[i] = COL_OFF(self, i) - base;
    }
    if (valid) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!COL_IS_NULL(self, i)) {
                valid[i >> 3] |= (uint8_t)(1 << (i & 7));
            }
        }
    }
    PyObject *c = (PyObject *)column_new((PyObject *)b, data, NULL, offs, valid, 0, n);
    Py_DECREF(b);
    return c;
}

static PyObject *
BinaryColumn_take(BinaryColumn *self, PyObject *indices)
{
    if (!PyList_Check(indices)) {
        PyErr_SetString(PyExc_TypeError, "take() wants a list of indexes");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(indices);
    Py_ssize_t *idx = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    if (idx == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = PyNumber_AsSsize_t(PyList_GET_ITEM(indices, k), PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) {
            PyMem_Free(idx);
            return NULL;
        }
        if (i < 0 || i >= self->length) {
            PyMem_Free(idx);
            PyErr_SetString(PyExc_IndexError, "BinaryColumn index out of range");
            return NULL;
        }
        idx[k] = i;
    }
    PyObject *out = column_take(self, idx, n);
    PyMem_Free(idx);
    return out;
}

static PyObject *
BinaryColumn_nbytes(BinaryColumn *self, PyObject *Py_UNUSED(ignored))
{
    if (self->length == 0) {
        return PyLong_FromLong(0);
    }
    return PyLong_FromLongLong(COL_OFF(self, self->length) - COL_OFF(self, 0));
}

static PyObject *
BinaryColumn_null_count(BinaryColumn *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t nulls = 0;
    if (self->valid) {
        for (Py_ssize_t i = 0; i < self->length; i++) {
            nulls += COL_IS_NULL(self, i) ? 1 : 0;
        }
    }
    return PyLong_FromSsize_t(nulls);
}

static PyObject *
BinaryColumn_repr(BinaryColumn *self)
{
    return PyUnicode_FromFormat("BinaryColumn(%zd items)", self->length);
}

static PyMethodDef BinaryColumn_methods[] = {
    {"take", (PyCFunction)BinaryColumn_take, METH_O,
     "take(indexes) -> BinaryColumn: those items, in that order, copied."},
    {"copy", (PyCFunction)BinaryColumn_copy, METH_NOARGS,
     "copy() -> BinaryColumn: the same items in memory of their own (nothing shared)."},
    {"nbytes", (PyCFunction)BinaryColumn_nbytes, METH_NOARGS,
     "nbytes() -> int: the items' bytes (nulls count 0)."},
    {"null_count", (PyCFunction)BinaryColumn_null_count, METH_NOARGS,
     "null_count() -> int: how many items are null."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods BinaryColumn_as_sequence = {
    .sq_length = (lenfunc)BinaryColumn_len,
    .sq_item = (ssizeargfunc)BinaryColumn_item,
};

static PyMappingMethods BinaryColumn_as_mapping = {
    .mp_length = (lenfunc)BinaryColumn_len,
    .mp_subscript = (binaryfunc)BinaryColumn_subscript,
};

PyTypeObject BinaryColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiokafka_ng.protocol._speedups.BinaryColumn",
    .tp_doc = PyDoc_STR(
        "BinaryColumn(offsets, data, validity=None, offset=0, length=-1, large=False)\n\n"
        "The items of an Arrow binary (or large_binary, large=True) array: a sequence of\n"
        "bytes or None. The offsets and validity bitmap are copied when the column is made;\n"
        "the data buffer is read in place (held: it cannot be resized while the column\n"
        "lives; changes to its bytes show in the items). Slicing gives a view; take() and\n"
        "copy() a column with memory of its own."),
    .tp_basicsize = sizeof(BinaryColumn),
    .tp_dealloc = (destructor)BinaryColumn_dealloc,
    .tp_repr = (reprfunc)BinaryColumn_repr,
    .tp_as_sequence = &BinaryColumn_as_sequence,
    .tp_as_mapping = &BinaryColumn_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = BinaryColumn_methods,
    .tp_new = BinaryColumn_new,
};


int
column_types_ready(void)
{
    if (PyType_Ready(&BackingType) < 0 || PyType_Ready(&BinaryColumnType) < 0) {
        return -1;
    }
    return 0;
}
