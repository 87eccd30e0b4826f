/* BinaryColumn: an Arrow binary array's buffers, read in place (see _column.c). Shared by
 * the two C files of aiokafka_ng.protocol._speedups. */
#ifndef AIOKAFKA_NG_COLUMN_H
#define AIOKAFKA_NG_COLUMN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    PyObject *backing; /* owns the memory below (buffer views, or memory of its own) */
    const char *data;
    const int32_t *off32; /* exactly one of off32/off64 is set */
    const int64_t *off64;
    const uint8_t *valid; /* NULL: no nulls */
    Py_ssize_t offset;    /* element 0 is entry ``offset`` of the offsets and the bitmap */
    Py_ssize_t length;
} BinaryColumn;

extern PyTypeObject BinaryColumnType;

#define COL_IS_NULL(c, j) ((c)->valid && !(((c)->valid[(j) >> 3] >> ((j) & 7)) & 1))
#define COL_OFF(c, j) ((c)->off32 ? (int64_t)(c)->off32[(j)] : (c)->off64[(j)])

/* Item i (0 <= i < length): *n = -1 when null, else its bytes at *p. */
static inline void
col_item(const BinaryColumn *c, Py_ssize_t i, const char **p, Py_ssize_t *n)
{
    Py_ssize_t j = c->offset + i;
    if (COL_IS_NULL(c, j)) {
        *p = NULL;
        *n = -1;
        return;
    }
    int64_t start = COL_OFF(c, j);
    *p = c->data + start;
    *n = (Py_ssize_t)(COL_OFF(c, j + 1) - start);
}

/* The items at run indexes ``idx`` (in range, in order) as a new column of its own. */
PyObject *column_take(BinaryColumn *self, const Py_ssize_t *idx, Py_ssize_t n);

/* PyType_Ready for the column types; -1 with an exception set on failure. */
int column_types_ready(void);

#endif
