// The Java client (kafka-clients 4.x) as a column of bench/bench_producer.py and
// bench/bench_consumer.py; bench/brokers.py compiles it once per run and starts one JVM per
// measurement.
//
//   produce BOOTSTRAP TOPIC RECORDS SIZE KEYED CODEC BATCH_SIZE ACKS LINGER_MS
//       RECORDS records of SIZE bytes (64 payloads of half random hex, padded with 'x', as
//       the Python side makes them), keys key-0..key-999 when KEYED is 1, else none;
//       BATCH_SIZE 0 keeps the client's default (16 KiB). The Java idiom: one
//       send(record, callback) per record, the callback counting outcomes, then flush().
//   consume BOOTSTRAP TOPIC RECORDS PARTITIONS
//       manual assignment of partitions 0..PARTITIONS-1 from the beginning, no group,
//       default fetch settings, poll() until RECORDS records arrived.
//   txn BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID SECONDS
//       (bench/bench_txn.py) transactions for SECONDS, one after another: begin, one
//       100 B record to OUTPUT partition 0, sendOffsetsToTransaction (INPUT partition 0,
//       GROUP), commit. Adds "p50" and "p99" (ms, one transaction) to the line below;
//       "count" is the transactions committed.
//
// Prints one JSON line: {"elapsed": s, "cpu": s, "count": n, "errors": n}. "elapsed" runs
// from after the client is built and knows the topic's partitions to the last ack (or
// record), as the Python clients are timed; "cpu" is the JVM's CPU (all threads: the
// sender, JIT compilers, GC) from before the client is built to after it is closed, the
// scope of the Python clients' CPU figures. JVM start, compile and class loading are
// outside both.
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class BenchClient {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args);
            case "consume" -> consume(args);
            case "txn" -> txn(args);
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static double cpuSeconds() {
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        return os.getProcessCpuTime() / 1e9;
    }

    static void report(double elapsed, double cpu, long count, long errors) {
        System.out.printf(
            "{\"elapsed\": %.6f, \"cpu\": %.6f, \"count\": %d, \"errors\": %d}%n",
            elapsed, cpu, count, errors);
    }

    static void produce(String[] a) throws Exception {
        String bootstrap = a[1], topic = a[2], codec = a[6], acks = a[8];
        int n = Integer.parseInt(a[3]), size = Integer.parseInt(a[4]);
        boolean keyed = a[5].equals("1");
        int batchSize = Integer.parseInt(a[7]);
        Random random = new Random();
        byte[][] values = new byte[64][];
        for (int i = 0; i < values.length; i++) {
            StringBuilder hex = new StringBuilder();
            for (int j = 0; j < size / 4; j++) {
                hex.append(String.format("%02x", random.nextInt(256)));
            }
            while (hex.length() < size) {
                hex.append('x');
            }
            values[i] = hex.substring(0, size).getBytes(StandardCharsets.US_ASCII);
        }
        byte[][] keys = new byte[1000][];
        for (int i = 0; i < keys.length; i++) {
            keys[i] = ("key-" + i).getBytes(StandardCharsets.US_ASCII);
        }
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, acks);
        props.put(ProducerConfig.LINGER_MS_CONFIG, a[9]);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        if (batchSize > 0) {
            props.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(batchSize));
        }
        AtomicLong ok = new AtomicLong(), failed = new AtomicLong();
        double cpu0 = cpuSeconds();
        double elapsed;
        try (var producer = new KafkaProducer<byte[], byte[]>(
                props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.partitionsFor(topic);
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                byte[] key = keyed ? keys[i % 1000] : null;
                producer.send(new ProducerRecord<>(topic, key, values[i % 64]), (meta, exc) -> {
                    (exc == null ? ok : failed).incrementAndGet();
                });
            }
            producer.flush();
            elapsed = (System.nanoTime() - t0) / 1e9;
        }
        report(elapsed, cpuSeconds() - cpu0, ok.get(), failed.get());
    }

    static void consume(String[] a) {
        String bootstrap = a[1], topic = a[2];
        long n = Long.parseLong(a[3]);
        int partitions = Integer.parseInt(a[4]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        double cpu0 = cpuSeconds();
        double elapsed;
        long count = 0;
        try (var consumer = new KafkaConsumer<byte[], byte[]>(
                props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.partitionsFor(topic);
            List<TopicPartition> assigned = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                assigned.add(new TopicPartition(topic, p));
            }
            long t0 = System.nanoTime();
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            while (count < n) {
                count += consumer.poll(Duration.ofSeconds(1)).count();
            }
            elapsed = (System.nanoTime() - t0) / 1e9;
        }
        report(elapsed, cpuSeconds() - cpu0, count, 0);
    }

    static void txn(String[] a) {
        String bootstrap = a[1], input = a[2], output = a[3], group = a[4], txid = a[5];
        double seconds = Double.parseDouble(a[6]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        byte[] value = "x".repeat(100).getBytes(StandardCharsets.US_ASCII);
        TopicPartition in = new TopicPartition(input, 0);
        ConsumerGroupMetadata meta = new ConsumerGroupMetadata(group);
        List<Double> took = new ArrayList<>();
        double cpu0 = cpuSeconds();
        double elapsed;
        try (var producer = new KafkaProducer<byte[], byte[]>(
                props, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            producer.partitionsFor(output);
            long t0 = System.nanoTime();
            long end = t0 + (long) (seconds * 1e9);
            long n = 0;
            while (System.nanoTime() < end) {
                long t = System.nanoTime();
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(output, 0, null, value));
                producer.sendOffsetsToTransaction(Map.of(in, new OffsetAndMetadata(++n)), meta);
                producer.commitTransaction();
                took.add((System.nanoTime() - t) / 1e6);
            }
            elapsed = (System.nanoTime() - t0) / 1e9;
        }
        double cpu = cpuSeconds() - cpu0;
        double[] sorted = took.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        System.out.printf(
            "{\"elapsed\": %.6f, \"cpu\": %.6f, \"count\": %d, \"errors\": 0, \"p50\": %.3f, \"p99\": %.3f}%n",
            elapsed, cpu, sorted.length, sorted[sorted.length / 2],
            sorted[Math.min(sorted.length - 1, (int) (sorted.length * 0.99))]);
    }
}
