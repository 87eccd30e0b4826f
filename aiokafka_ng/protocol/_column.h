/* BinaryColumn: an Arrow binary array's items, read from its data buffer in place (see
 * _column.c). Shared by the two C files of aiokafka_ng.protocol._speedups. */
#ifndef AIOKAFKA_NG_COLUMN_H
#define AIOKAFKA_NG_COLUMN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    PyObject *backing; /* owns the memory below: the data buffer's view (or a copy of the
                        * data), and the column's own copy of its offsets and bitmap */
    const char *data;
    const int32_t *off32; /* item i is data[off[i]:off[i+1]]; exactly one of off32/off64 */
    const int64_t *off64; /* is set, and every offset was checked on this copy */
    const uint8_t *valid; /* NULL: no nulls */
    Py_ssize_t vbit;      /* item i's validity bit is bit vbit + i of ``valid`` */
    Py_ssize_t length;
} BinaryColumn;

extern PyTypeObject BinaryColumnType;

#define COL_IS_NULL(c, i)                                                                    \
    ((c)->valid && !(((c)->valid[((c)->vbit + (i)) >> 3] >> (((c)->vbit + (i)) & 7)) & 1))
#define COL_OFF(c, i) ((c)->off32 ? (int64_t)(c)->off32[(i)] : (c)->off64[(i)])

/* Item i (0 <= i < length): *n = -1 when null, else its bytes at *p. */
static inline void
col_item(const BinaryColumn *c, Py_ssize_t i, const char **p, Py_ssize_t *n)
{
    if (COL_IS_NULL(c, i)) {
        *p = NULL;
        *n = -1;
        return;
    }
    int64_t start = COL_OFF(c, i);
    *p = c->data + start;
    *n = (Py_ssize_t)(COL_OFF(c, i + 1) - start);
}

/* The items at run indexes ``idx`` (in range, in order) as a new column of its own. */
PyObject *column_take(BinaryColumn *self, const Py_ssize_t *idx, Py_ssize_t n);

/* PyType_Ready for the column types; -1 with an exception set on failure. */
int column_types_ready(void);

#endif
