"""The Spark driver of tests/kafka/test_spark_exactly_once_executor_loss.py: writes in which
the executor running task 0 is SIGKILLed mid-write, and Spark reruns the task elsewhere.

Losing an executor needs an executor that is not the driver's JVM (in local mode the
"executor" is the driver), so this script starts the standalone cluster of
tests/kafka/spark_standalone.py (master on 127.0.0.1, one-core workers on 127.0.0.2 and
127.0.0.3) and stops it on exit.

Each write has two tasks (partition 0 of each holds ``--rows`` / 2 rows). A Python UDF in
the projection stops the first attempt of partition 0 at its ``--fail-at``-th row until
partition 0 of the output holds ``--written`` records (each Spark partition writes to the
Kafka partition of its number; for an exactlyOnce write they are in the attempt's open
transaction), then writes the pid of its executor's JVM to ``{topic}.kill`` in ``--marks``
and waits (bounded) for that JVM to die. A thread of this driver kills every pid it finds
in such a file with SIGKILL: the worker sees its executor exit, the master tells the driver,
and Spark fails the attempt (ExecutorLostFailure) and runs it again on another executor
(the other host's, or the replacement the worker starts). Every attempt of partition 0
leaves ``{topic}.a{attempt}`` holding its executor's pid, and Spark's TaskSetManager logs
its decisions (INFO) to stderr: the test reads both as the proof that the task ran twice,
on different executors, and that the first executor died mid-task.

Writes, one after the other: ``--alo-out`` (at-least-once batch write), ``--eos-out``
(exactlyOnce batch write), ``--stream-out`` (exactlyOnce streaming query over ``--input``,
one micro-batch). Prints ``KILLED <topic> <pid>`` per kill and ``DONE <topic>`` after each
write that succeeded; a failed write fails the script.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.kafka.spark_standalone import partition_end, session_builder, standalone_cluster
from tests.spark_session import batch_write, driver_arguments, stream_write

PAD = "x" * 400
EXECUTOR_MAIN = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone
        return b""


def _executor_pid() -> int:
    """The pid of the executor JVM this Python worker serves.

    Found by walking parent pids in /proc (field 4 of /proc/PID/stat, after the
    parenthesised command name): the worker is a fork of pyspark's daemon
    (``spark.python.use.daemon``, on by default) or the JVM's own child, and the daemon is
    a child of the executor JVM, whose command line names its main class
    ``CoarseGrainedExecutorBackend``.
    """
    pid = os.getpid()
    for _ in range(10):  # a few levels at most
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if EXECUTOR_MAIN in _cmdline(pid):
            return pid
        if pid <= 1:
            break
    raise RuntimeError(f"no {EXECUTOR_MAIN.decode()} among the ancestors of {os.getpid()}")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by its worker, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _killer(marks: Path, stop: threading.Event) -> None:
    """SIGKILL each executor pid a UDF wrote to ``{topic}.kill``, once."""
    done: set[Path] = set()
    while not stop.is_set():
        for mark in marks.glob("*.kill"):
            if mark in done:
                continue
            done.add(mark)
            pid = int(mark.read_text())
            # Only an executor JVM: a stale or wrong pid must not kill anything else.
            if EXECUTOR_MAIN in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)
                print(f"KILLED {mark.name.removesuffix('.kill')} {pid}", flush=True)
            else:
                print(f"NOT AN EXECUTOR {mark.name} {pid}", flush=True)
        stop.wait(0.05)


def _kill_first_attempt(args: argparse.Namespace, topic: str) -> Any:
    """The UDF: value -> padded string; attempt 0 of partition 0 has its executor killed."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    bootstrap, fail_at, written = args.bootstrap, args.fail_at, args.written
    marks = Path(args.marks)
    seen: dict[int, int] = {}  # per task attempt: rows this worker has transformed

    def wait(what: str, done: Any) -> None:
        deadline = time.monotonic() + 60
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: attempt 0 waited 60 s for {what}")
            time.sleep(0.05)

    def transform(v: int) -> str:
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.partitionId() == 0:
            attempt = ctx.attemptNumber()
            n = seen[ctx.taskAttemptId()] = seen.get(ctx.taskAttemptId(), 0) + 1
            if n == 1:
                (marks / f"{topic}.a{attempt}").write_text(str(_executor_pid()))
            if n == fail_at and attempt == 0:
                wait(
                    "its rows",
                    lambda: partition_end(bootstrap, topic, "read_uncommitted") >= written,
                )
                jvm = _executor_pid()
                tmp = marks / f"{topic}.pid.tmp"
                tmp.write_text(str(jvm))
                tmp.rename(marks / f"{topic}.kill")  # whole, for the killer thread
                wait("its executor's death", lambda: not _alive(jvm))
                # Unreachable in practice: pyspark's daemon sees its JVM's pipe close and
                # ends its workers (SIGHUP), this one included.
                raise RuntimeError(f"{topic}: attempt 0 outlived its executor {jvm}")
        return f"{v:06d}{PAD}"

    return F.udf(transform, StringType())


def main() -> None:
    args = driver_arguments(__doc__, cluster=True)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    work = Path(args.work)
    from aiokafka_ng.spark import register

    stop = threading.Event()
    killer = threading.Thread(target=_killer, args=(Path(args.marks), stop), daemon=True)
    with standalone_cluster(work) as master:
        killer.start()
        spark = session_builder(master, work, "aiokafka_ng executor loss test").getOrCreate()
        try:
            register(spark)
            _writes(spark, args)
        finally:
            stop.set()
            killer.join(timeout=5)
            spark.stop()


def _writes(spark: Any, args: argparse.Namespace) -> None:
    for topic, exactly_once in ((args.alo_out, False), (args.eos_out, True)):
        batch_write(spark, args, _kill_first_attempt(args, topic), topic, exactly_once)
        print(f"DONE {topic}", flush=True)
    udf = _kill_first_attempt(args, args.stream_out)
    stream_write(spark, args, udf, os.path.join(args.work, "checkpoint"))
    print(f"DONE {args.stream_out}", flush=True)


if __name__ == "__main__":
    main()
