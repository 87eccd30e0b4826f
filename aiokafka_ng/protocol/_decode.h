/* decode_columns (_decode.c), registered by _speedups.c. */
#ifndef AIOKAFKA_NG_DECODE_H
#define AIOKAFKA_NG_DECODE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* decode_columns(data, pos, end, count, base_offset, log_append, low, high, index,
 *                next_offset, offset_runs, buffers)
 *     -> (added, next_offset, key_nulls, value_nulls) | None
 * RecordColumns._parse is the twin; None hands the batch to it. */
PyObject *decode_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
