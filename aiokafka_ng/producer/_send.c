/* send_fast: Producer.send()'s common case in one C call (part of the _speedups extension).
 *
 * Theory of operation
 * -------------------
 * A record sent with bytes (or None) key and value, no headers, no serializer, no
 * transaction, to a topic whose metadata is known and which has nothing queued before it,
 * costs ~1.4 us in producer.py's send(): about twenty checks and attribute reads, each a
 * bytecode dispatch. That is most of what separates the gather pattern (await send() per
 * record) from asyncio's own ceiling (issue 36). Here the same steps run as one C call.
 *
 * The Python send() is the reference and runs first in mind: this function decides nothing
 * it does not. It takes a record only when every check the Python path makes passes, and
 * returns None -- having changed nothing -- for anything else (a serializer, headers, a
 * bad argument, a stopped producer, a full buffer, metadata not known...), and send() then
 * runs its own path, which raises or waits exactly as before. What it does is what the
 * Python send() asks of the engine (ProducerEngine.try_reserve, then .add: the pool's and
 * the accumulator's methods below) for a record that fits the open batch of its
 * partition; the functions it mirrors (tests/protocol/test_compiled_twins.py checks these
 * names resolve, and each names send_fast back):
 *
 * Mirrors: aiokafka_ng.producer.batch.TopicQueue.placing
 * Mirrors: aiokafka_ng.producer.memory.MemoryPool.try_reserve
 * Mirrors: aiokafka_ng.producer.accumulator.Accumulator.place
 *
 * -- the topic's metadata known and nothing of it waiting (else None: the Python path
 * queues the record), the memory free now (else None: the Python path waits for it), then
 * the one-record placement rule: the partition (murmur2 of the key, else the sticky one),
 * the open batch's builder.append, the batch's futures/positions/memory. Anything else of
 * that rule (no batch yet, the batch full or built, no sticky partition drawn yet, a
 * partition out of range) is handed to Accumulator.place itself, which the C code calls.
 * tests/producer/test_send_fast.py holds the two paths to the same futures, batches, bytes
 * and pool.
 *
 * The objects it reads are the producer's own slotted classes (Intake, the accumulator's
 * TopicQueue, PartitionQueue, ProducerBatch, DeliveryFuture, MemoryPool). send_fast_setup()
 * is given the classes once, finds each slot's offset from its member descriptor and
 * refuses (TypeError) a layout it does not know; every call checks each object's exact
 * type before reading a slot, so a subclass or a stand-in object takes the Python path.
 * Slots may be unset (NULL): that also means the Python path.
 *
 * A future is made as Delivery.__init__ makes one (its eight slots set to the same
 * values; setup checks there are exactly those eight), first: allocating a GC object may
 * run a collection and with it finalizers, so everything borrowed (the accumulator, the
 * topic, the pool's count) is read after it, and nothing between those reads and the
 * memory's reservation runs Python code or allocates a GC object. builder.append and
 * Accumulator.place are Python-level calls made holding what they use; their errors
 * propagate as they would from send().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#ifndef Py_T_OBJECT_EX /* Python 3.11 */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

#include "_send.h"

/* The classes (strong references, set once by send_fast_setup). */
static PyTypeObject *intake_t, *engine_t, *topic_t, *pq_t, *batch_t, *fut_t, *pool_t;
static PyObject *pending_exc;    /* future._PENDING */
static PyObject *empty_tuple;
static PyObject *str_append, *str_place, *str_topics, *str_partitioner;
static PyObject *minus_one;
static Py_ssize_t record_overhead = -1;

/* Slot offsets. */
static Py_ssize_t in_running, in_key_ser, in_value_ser, in_valid_topics, in_txn, in_max_record,
    in_engine, in_loop, in_last_ts;
static Py_ssize_t en_acc, en_pool;
static Py_ssize_t tp_ready, tp_pending, tp_partitions, tp_sticky;
static Py_ssize_t pq_batches;
static Py_ssize_t b_data, b_builder, b_futures, b_positions, b_memory;
static Py_ssize_t f_batch, f_ctx, f_delta, f_exc, f_loop, f_timestamp, f_waiters, f_topic;
static Py_ssize_t pl_available, pl_waiters;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* Set a slot to a new reference (stolen). */
static inline void
set_slot(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

static int
offset_of(PyTypeObject *cls, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)cls, name);
    if (d == NULL) {
        return -1;
    }
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)d)->d_member->type == Py_T_OBJECT_EX &&
             !(((PyMemberDescrObject *)d)->d_member->flags & Py_READONLY);
    if (ok) {
        *out = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    Py_DECREF(d);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "send_fast_setup: %.100s.%.100s is not a slot",
                     cls->tp_name, name);
        return -1;
    }
    return 0;
}

static int
take_type(PyObject *arg, PyTypeObject **out)
{
    if (!PyType_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "send_fast_setup wants classes");
        return -1;
    }
    Py_INCREF(arg);
    Py_XSETREF(*out, (PyTypeObject *)arg);
    return 0;
}

PyObject *
send_fast_setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "send_fast_setup(Intake, ProducerEngine, Topic, PartitionQueue, "
                        "ProducerBatch, DeliveryFuture, MemoryPool, record_overhead, pending)");
        return NULL;
    }
    record_overhead = -1; /* not ready until every offset is known */
    if (take_type(args[0], &intake_t) < 0 || take_type(args[1], &engine_t) < 0 ||
        take_type(args[2], &topic_t) < 0 || take_type(args[3], &pq_t) < 0 ||
        take_type(args[4], &batch_t) < 0 || take_type(args[5], &fut_t) < 0 ||
        take_type(args[6], &pool_t) < 0) {
        return NULL;
    }
    Py_ssize_t overhead = PyLong_AsSsize_t(args[7]);
    if (overhead == -1 && PyErr_Occurred()) {
        return NULL;
    }
    struct {
        PyTypeObject *cls;
        const char *name;
        Py_ssize_t *out;
    } slots[] = {
        {intake_t, "running", &in_running},
        {intake_t, "key_ser", &in_key_ser},
        {intake_t, "value_ser", &in_value_ser},
        {intake_t, "valid_topics", &in_valid_topics},
        {intake_t, "txn", &in_txn},
        {intake_t, "max_record", &in_max_record},
        {intake_t, "engine", &in_engine},
        {engine_t, "acc", &en_acc},
        {engine_t, "pool", &en_pool},
        {intake_t, "loop", &in_loop},
        {intake_t, "last_ts", &in_last_ts},
        {topic_t, "ready", &tp_ready},
        {topic_t, "pending", &tp_pending},
        {topic_t, "partitions", &tp_partitions},
        {topic_t, "sticky", &tp_sticky},
        {pq_t, "batches", &pq_batches},
        {batch_t, "data", &b_data},
        {batch_t, "builder", &b_builder},
        {batch_t, "futures", &b_futures},
        {batch_t, "positions", &b_positions},
        {batch_t, "memory", &b_memory},
        {fut_t, "_batch", &f_batch},
        {fut_t, "_ctx", &f_ctx},
        {fut_t, "_delta", &f_delta},
        {fut_t, "_exc", &f_exc},
        {fut_t, "_loop", &f_loop},
        {fut_t, "_timestamp", &f_timestamp},
        {fut_t, "_waiters", &f_waiters},
        {fut_t, "topic", &f_topic},
        {pool_t, "_available", &pl_available},
        {pool_t, "_waiters", &pl_waiters},
    };
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
        if (offset_of(slots[i].cls, slots[i].name, slots[i].out) < 0) {
            return NULL;
        }
    }
    /* A future made here must be what Delivery.__init__ makes: exactly these slots and
     * no __dict__ (a new slot would be left NULL here, so refuse the layout). */
    Py_ssize_t fut_slots = (fut_t->tp_basicsize - (Py_ssize_t)sizeof(PyObject)) /
                           (Py_ssize_t)sizeof(PyObject *);
    if (fut_slots != 8 || fut_t->tp_dictoffset != 0 || !PyType_IS_GC(fut_t)) {
        PyErr_SetString(PyExc_TypeError, "send_fast_setup: DeliveryFuture's layout changed");
        return NULL;
    }
    if ((str_append == NULL && (str_append = PyUnicode_InternFromString("append")) == NULL) ||
        (str_place == NULL && (str_place = PyUnicode_InternFromString("place")) == NULL) ||
        (str_topics == NULL && (str_topics = PyUnicode_InternFromString("topics")) == NULL) ||
        (str_partitioner == NULL &&
         (str_partitioner = PyUnicode_InternFromString("partitioner")) == NULL) ||
        (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL) ||
        (minus_one == NULL && (minus_one = PyLong_FromLong(-1)) == NULL)) {
        return NULL;
    }
    Py_INCREF(args[8]);
    Py_XSETREF(pending_exc, args[8]);
    record_overhead = overhead;
    Py_RETURN_NONE;
}

/* The int in `slot` as a C integer; -1 (and no error) when it is not a plain int. */
static inline Py_ssize_t
slot_size(PyObject *v)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        return -1;
    }
    Py_ssize_t n = PyLong_AsSsize_t(v);
    if (n == -1 && PyErr_Occurred()) {
        PyErr_Clear();
    }
    return n;
}

/* Place `fut`'s record as Accumulator.place would; 0, or -1 with an exception set. */
static int
place(PyObject *acc, PyObject *t, PyObject *partition_arg, Py_ssize_t partition,
      PyObject *key, PyObject *value, PyObject *ts, PyObject *size_obj, Py_ssize_t size,
      PyObject *fut)
{
    PyObject *partitions = SLOT(t, tp_partitions);
    if (partitions == NULL || !PyList_CheckExact(partitions)) {
        goto slow;
    }
    Py_ssize_t n = PyList_GET_SIZE(partitions);
    if (partition < 0) {
        if (n == 0) {
            goto slow;
        }
        if (key != Py_None) {
            uint32_t h = (uint32_t)murmur2_raw((const unsigned char *)PyBytes_AS_STRING(key),
                                               PyBytes_GET_SIZE(key));
            partition = (Py_ssize_t)((h & 0x7fffffffU) % (uint32_t)n);
        }
        else {
            partition = slot_size(SLOT(t, tp_sticky));
            if (partition < 0 || partition >= n) {
                goto slow; /* no sticky partition drawn yet */
            }
        }
    }
    if (partition >= n) {
        goto slow; /* place() fails the record */
    }
    PyObject *pq = PyList_GET_ITEM(partitions, partition);
    if (!Py_IS_TYPE(pq, pq_t)) {
        goto slow;
    }
    PyObject *batches = SLOT(pq, pq_batches);
    if (batches == NULL) {
        goto slow;
    }
    Py_ssize_t nb = PySequence_Size(batches);
    if (nb <= 0) {
        if (nb < 0) {
            return -1;
        }
        goto slow; /* a new batch: place() opens it */
    }
    PyObject *batch = PySequence_GetItem(batches, nb - 1);
    if (batch == NULL) {
        return -1;
    }
    PyObject *futures = SLOT(batch, b_futures);
    PyObject *positions = SLOT(batch, b_positions);
    PyObject *memory = SLOT(batch, b_memory);
    PyObject *builder = SLOT(batch, b_builder);
    if (!Py_IS_TYPE(batch, batch_t) || SLOT(batch, b_data) != Py_None || builder == NULL ||
        futures == NULL || !PyList_CheckExact(futures) || positions == NULL ||
        (positions != Py_None && !PyList_CheckExact(positions)) || slot_size(memory) < 0) {
        Py_DECREF(batch);
        goto slow;
    }
    PyObject *call[5] = {builder, ts, key, value, empty_tuple};
    PyObject *delta =
        PyObject_VectorcallMethod(str_append, call, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (delta == NULL) {
        Py_DECREF(batch);
        return -1;
    }
    if (delta == Py_None) {
        /* The batch is full: place() closes it, switches the sticky partition, opens the
         * next batch (the builder refuses the record again there: nothing changed). */
        Py_DECREF(delta);
        Py_DECREF(batch);
        goto slow;
    }
    /* Read again: append was a call into Python code (a collection may have run). */
    futures = SLOT(batch, b_futures);
    positions = SLOT(batch, b_positions);
    memory = SLOT(batch, b_memory);
    if (futures == NULL || !PyList_CheckExact(futures) || positions == NULL ||
        (positions != Py_None && !PyList_CheckExact(positions)) || slot_size(memory) < 0) {
        PyErr_SetString(PyExc_RuntimeError, "send_fast: the batch changed during append");
        Py_DECREF(delta);
        Py_DECREF(batch);
        return -1;
    }
    PyObject *new_memory = PyLong_FromSsize_t(slot_size(memory) + size);
    if (new_memory == NULL || PyList_Append(futures, fut) < 0 ||
        (positions != Py_None && PyList_Append(positions, minus_one) < 0)) {
        /* Only MemoryError gets here; the record is in the builder but not counted. */
        Py_XDECREF(new_memory);
        Py_DECREF(delta);
        Py_DECREF(batch);
        return -1;
    }
    set_slot(fut, f_batch, batch); /* the reference from PySequence_GetItem */
    set_slot(fut, f_delta, delta);
    set_slot(batch, b_memory, new_memory);
    return 0;

slow:;
    PyObject *pcall[9] = {acc,   t,  partition_arg, key, value, Py_None,
                          ts,    size_obj, fut};
    PyObject *r = PyObject_VectorcallMethod(str_place, pcall, 9 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* send_fast(intake, topic, value, key, partition, timestamp_ms, headers)
 *     -> DeliveryFuture | None */
PyObject *
send_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "send_fast(intake, topic, value, key, partition, timestamp_ms, headers)");
        return NULL;
    }
    PyObject *intake = args[0], *topic = args[1], *value = args[2], *key = args[3];
    PyObject *partition_arg = args[4], *ts = args[5], *headers = args[6];
    if (record_overhead < 0 || !Py_IS_TYPE(intake, intake_t)) {
        Py_RETURN_NONE;
    }
    if (SLOT(intake, in_running) != Py_True || SLOT(intake, in_key_ser) != Py_None ||
        SLOT(intake, in_value_ser) != Py_None || SLOT(intake, in_txn) != Py_None ||
        headers != Py_None || !PyUnicode_CheckExact(topic)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t size = record_overhead;
    if (value != Py_None) {
        if (!PyBytes_CheckExact(value)) {
            Py_RETURN_NONE;
        }
        size += PyBytes_GET_SIZE(value);
    }
    if (key != Py_None) {
        if (!PyBytes_CheckExact(key)) {
            Py_RETURN_NONE;
        }
        size += PyBytes_GET_SIZE(key);
    }
    PyObject *valid = SLOT(intake, in_valid_topics);
    if (valid == NULL || !PySet_CheckExact(valid)) {
        Py_RETURN_NONE;
    }
    int known = PySet_Contains(valid, topic);
    if (known <= 0) {
        if (known < 0) {
            return NULL;
        }
        Py_RETURN_NONE; /* send() checks the name */
    }
    Py_ssize_t partition = -1;
    if (partition_arg == Py_None) {
        partition_arg = minus_one;
    }
    else {
        partition = slot_size(partition_arg);
        if (partition < 0) {
            Py_RETURN_NONE; /* send() refuses it */
        }
    }
    Py_ssize_t max_record = slot_size(SLOT(intake, in_max_record));
    if (max_record < 0 || size > max_record) {
        Py_RETURN_NONE; /* send() fails the future */
    }
    /* The timestamp: the caller's, or now -- one int object per millisecond (send()). */
    if (ts == Py_None) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        PyObject *last = SLOT(intake, in_last_ts);
        if (last != NULL && PyLong_CheckExact(last) && PyLong_AsLongLong(last) == ms) {
            ts = last;
        }
        else {
            PyErr_Clear();
            PyObject *fresh = PyLong_FromLongLong(ms);
            if (fresh == NULL) {
                return NULL;
            }
            set_slot(intake, in_last_ts, fresh);
            ts = fresh;
        }
    }
    else {
        if (!PyLong_CheckExact(ts)) {
            Py_RETURN_NONE;
        }
        long long v = PyLong_AsLongLong(ts);
        if (v < 0) {
            PyErr_Clear(); /* negative or beyond int64: send() decides */
            Py_RETURN_NONE;
        }
    }

    /* The future, as Delivery.__init__ makes it -- made before anything below is read:
     * allocating a GC object may run a collection (and finalizers), after which borrowed
     * references and the pool's count read before it could be stale. Refused from here
     * on, it is simply dropped. */
    PyObject *fut = fut_t->tp_alloc(fut_t, 0);
    if (fut == NULL) {
        return NULL;
    }
    Py_INCREF(topic);
    SLOT(fut, f_topic) = topic;
    Py_INCREF(ts);
    SLOT(fut, f_timestamp) = ts;
    Py_INCREF(Py_None);
    SLOT(fut, f_loop) = Py_None; /* the intake's loop, below */
    Py_INCREF(Py_None);
    SLOT(fut, f_batch) = Py_None;
    SLOT(fut, f_delta) = PyLong_FromLong(0); /* a cached small int: cannot fail */
    Py_INCREF(pending_exc);
    SLOT(fut, f_exc) = pending_exc;
    Py_INCREF(Py_None);
    SLOT(fut, f_waiters) = Py_None;
    Py_INCREF(Py_None);
    SLOT(fut, f_ctx) = Py_None;

    /* Nothing from here to place() runs Python code or allocates a GC object. */
    PyObject *engine = SLOT(intake, in_engine);
    if (engine == NULL || !Py_IS_TYPE(engine, engine_t)) {
        goto refused;
    }
    PyObject *acc = SLOT(engine, en_acc);
    PyObject *pool = SLOT(engine, en_pool);
    PyObject *loop = SLOT(intake, in_loop);
    if (acc == NULL || pool == NULL || loop == NULL || !Py_IS_TYPE(pool, pool_t)) {
        goto refused;
    }
    PyObject *topics = PyObject_GetAttr(acc, str_topics);
    if (topics == NULL) {
        goto error;
    }
    PyObject *t = PyDict_CheckExact(topics) ? PyDict_GetItemWithError(topics, topic) : NULL;
    Py_DECREF(topics); /* the accumulator keeps the dict, the dict keeps t */
    if (t == NULL) {
        if (PyErr_Occurred()) {
            goto error;
        }
        goto refused;
    }
    PyObject *pending = Py_IS_TYPE(t, topic_t) ? SLOT(t, tp_pending) : NULL;
    if (pending == NULL || SLOT(t, tp_ready) != Py_True) {
        goto refused;
    }
    Py_ssize_t queued = PySequence_Size(pending);
    if (queued != 0) {
        if (queued < 0) {
            goto error;
        }
        goto refused; /* records wait before this one */
    }
    PyObject *partitioner = PyObject_GetAttr(acc, str_partitioner);
    if (partitioner == NULL) {
        goto error;
    }
    Py_DECREF(partitioner); /* only compared: the accumulator keeps it */
    if (partitioner != Py_None) {
        goto refused;
    }
    PyObject *pool_waiters = SLOT(pool, pl_waiters);
    Py_ssize_t available = slot_size(SLOT(pool, pl_available));
    if (pool_waiters == NULL || available < 0 || size > available) {
        goto refused; /* send() waits for memory */
    }
    Py_ssize_t waiting = PySequence_Size(pool_waiters);
    if (waiting != 0) {
        if (waiting < 0) {
            goto error;
        }
        goto refused;
    }

    /* Take the memory (MemoryPool.try_reserve), then place. */
    PyObject *left = PyLong_FromSsize_t(available - size);
    PyObject *size_obj = PyLong_FromSsize_t(size);
    if (left == NULL || size_obj == NULL) {
        Py_XDECREF(left);
        Py_XDECREF(size_obj);
        goto error;
    }
    set_slot(pool, pl_available, left);
    Py_INCREF(loop);
    set_slot(fut, f_loop, loop);
    /* place() calls Python code (builder.append, Accumulator.place): hold what it uses. */
    Py_INCREF(acc);
    Py_INCREF(t);
    int placed = place(acc, t, partition_arg, partition, key, value, ts, size_obj, size, fut);
    Py_DECREF(t);
    Py_DECREF(acc);
    Py_DECREF(size_obj);
    if (placed < 0) {
        goto error;
    }
    return fut;

refused:
    Py_DECREF(fut);
    Py_RETURN_NONE;
error:
    Py_DECREF(fut);
    return NULL;
}
