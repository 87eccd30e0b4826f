/* BinaryColumn: the items of an Arrow binary (or large_binary) array, read in place from its
 * buffers, for the bulk path of aiokafka_ng.protocol._speedups (see _speedups.c).
 *
 * A column is made from PEP 3118 buffers (what pyarrow's ``Array.buffers()`` gives: offsets,
 * data, optional validity bitmap) and an element offset and length, as Arrow slices them. It
 * checks them once, when made: every offset it will read lies inside the data and none
 * decreases, and the bitmap covers every item, so nothing read later can stray outside the
 * buffers. The buffers are held (views released when the last column using them is freed);
 * slicing gives a view sharing them, ``take()`` a copy with memory of its own.
 */
#include "_column.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    Py_buffer views[3]; /* acquired from the buffers a column was made from */
    int nviews;
    void *owned[3]; /* or memory of its own (take) */
    int nowned;
} Backing;

static void
Backing_dealloc(Backing *self)
{
    for (int i = 0; i < self->nviews; i++) {
        PyBuffer_Release(&self->views[i]);
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





static BinaryColumn *
column_new(PyObject *backing, const char *data, const int32_t *off32, const int64_t *off64,
           const uint8_t *valid, Py_ssize_t offset, Py_ssize_t length)
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
    c->offset = offset;
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
    Backing *b = PyObject_New(Backing, &BackingType);
    if (b == NULL) {
        return NULL;
    }
    b->nviews = 0;
    b->nowned = 0;
    BinaryColumn *c = NULL;
    if (PyObject_GetBuffer(offsets, &b->views[0], PyBUF_SIMPLE) < 0) {
        goto done;
    }
    b->nviews = 1;
    static const char empty[1] = {0};
    const char *dp = empty;
    Py_ssize_t dlen = 0;
    if (data != Py_None) {
        if (PyObject_GetBuffer(data, &b->views[1], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        b->nviews = 2;
        dp = (const char *)b->views[1].buf;
        dlen = b->views[1].len;
    }
    const uint8_t *vp = NULL;
    Py_ssize_t vlen = 0;
    if (validity != Py_None) {
        Py_buffer *v = &b->views[b->nviews];
        if (PyObject_GetBuffer(validity, v, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        b->nviews++;
        vp = (const uint8_t *)v->buf;
        vlen = v->len;
    }
    Py_ssize_t width = large ? 8 : 4;
    Py_ssize_t entries = b->views[0].len / width;
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
    if (vp != NULL && vlen < (offset + length + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "BinaryColumn: validity bitmap too short");
        goto done;
    }
    if (((uintptr_t)b->views[0].buf) % width) {
        PyErr_SetString(PyExc_ValueError, "BinaryColumn: offsets buffer is not aligned");
        goto done;
    }
    const int32_t *o32 = large ? NULL : (const int32_t *)b->views[0].buf;
    const int64_t *o64 = large ? (const int64_t *)b->views[0].buf : NULL;
    int64_t prev = large ? o64[offset] : o32[offset];
    if (prev < 0 || prev > dlen) {
        PyErr_SetString(PyExc_ValueError, "BinaryColumn: an offset lies outside the data");
        goto done;
    }
    for (Py_ssize_t j = offset + 1; j <= offset + length; j++) {
        int64_t o = large ? o64[j] : o32[j];
        if (o < prev || o > dlen) {
            PyErr_SetString(PyExc_ValueError,
                            "BinaryColumn: offsets decrease or lie outside the data");
            goto done;
        }
        prev = o;
    }
    c = column_new((PyObject *)b, dp, o32, o64, vp, offset, length);
done:
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
        return (PyObject *)column_new(self->backing, self->data, self->off32, self->off64,
                                      self->valid, self->offset + start, n);
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

/* The items at ``indices`` (ints, in order) as a new column with buffers of its own. */
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
    Backing *b = PyObject_New(Backing, &BackingType);
    if (b == NULL) {
        return NULL;
    }
    b->nviews = 0;
    b->nowned = 0;
    char *data = PyMem_Malloc(total ? (size_t)total : 1);
    int64_t *offs = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    uint8_t *valid = any_null ? PyMem_Calloc((size_t)(n + 7) / 8, 1) : NULL;
    if (data) {
        b->owned[b->nowned++] = data;
    }
    if (offs) {
        b->owned[b->nowned++] = offs;
    }
    if (valid) {
        b->owned[b->nowned++] = valid;
    }
    if (!data || !offs || (any_null && !valid)) {
        Py_DECREF(b);
        return PyErr_NoMemory();
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
    return PyLong_FromLongLong(COL_OFF(self, self->offset + self->length) -
                               COL_OFF(self, self->offset));
}

static PyObject *
BinaryColumn_null_count(BinaryColumn *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t nulls = 0;
    if (self->valid) {
        for (Py_ssize_t i = 0; i < self->length; i++) {
            Py_ssize_t j = self->offset + i;
            nulls += COL_IS_NULL(self, j) ? 1 : 0;
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
        "The items of an Arrow binary (or large_binary, large=True) array, read in place\n"
        "from its buffers: a sequence of bytes or None. Slicing gives a view; take() a copy."),
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
