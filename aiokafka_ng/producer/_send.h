/* send_fast and send_fast_setup (producer/_send.c), registered by protocol/_speedups.c. */
#ifndef AIOKAFKA_NG_SEND_H
#define AIOKAFKA_NG_SEND_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* send_fast_setup(Intake, ProducerEngine, Topic, PartitionQueue, ProducerBatch,
 *                 DeliveryFuture, MemoryPool, record_overhead, pending) -> None; TypeError
 *                 for a layout it does not know */
PyObject *send_fast_setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* send_fast(intake, topic, value, key, partition, timestamp_ms, headers)
 *     -> DeliveryFuture | None (None: nothing done, Producer.send() takes the record) */
PyObject *send_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* Kafka's murmur2 as a signed int32 (_speedups.c). */
int32_t murmur2_raw(const unsigned char *data, Py_ssize_t length);

#endif
