// The Java client (kafka-clients 4.x) as an interop peer for tests/kafka/test_java_interop.py.
//
// Run as a single source file: java -cp <kafka libs>/* Interop.java < spec.json
// The first stdin line is a JSON spec {"bootstrap": ..., "ops": [...]}; the ops run in order
// in this one JVM (a JVM start costs seconds, so the test batches its cases). Every result is
// one JSON line on stdout; bytes (keys, values, header values) are base64, null stays null.
// Ops:
//   produce   {topic, compression, idempotent, transactional_id?, client_id?, hold_ms?,
//             records? | transactions?} (hold_ms: stay open that long before close)
//             transactions: [{"commit": bool, "records": [...]}]; a record is
//             {partition?, key, value, timestamp?, headers: [[name, value], ...]}
//             -> {"op":"produced", "topic", "acks": [[partition, offset, timestamp], ...]}
//   consume   {topic, isolation, count?, client_id?} reads every partition from the beginning: at least
//             count records (when given), then up to each partition's end
//             offset (the LSO under read_committed) -> {"op":"record", ...} per record, then
//             {"op":"consumed", "topic", "count"}
//   group     {topic, group_id, group_protocol?} a group member (classic unless
//             group_protocol is "consumer") with the default assignors: prints
//             {"op":"assigned", "partitions"} on every assignment, each record, commits
//             synchronously after each poll, and leaves when stdin yields a line or closes;
//             isolation? (read_committed unless given); with tolerate_errors (the partition
//             workloads) a failed commit prints {"op":"commit_failed","error"} and the loop
//             goes on, and "committed" carries the offsets: [[partition, offset], ...];
//             request_timeout_ms? sets request.timeout.ms
//   partition {keys, partitions} -> {"op":"partitions", "picked": [...]} by Java's default
//             partitioner (murmur2 of the key bytes)
//   share     {topic, group_id, max_poll_records?} a KafkaShareConsumer (implicit
//             acknowledgement): prints {"op":"share_started"} after its first poll, each
//             record (with "delivery_count"), {"op":"share_committed", "errors"} after each
//             non-empty poll's commitSync, and leaves when stdin yields a line or closes
//   stream    {topic, partitions, interval_ms} an idempotent acks=all producer sending
//             record n (value n as 8 digits) to partition n % partitions every interval_ms
//             until stdin yields a line or closes, then flushing: prints {"op":"sent","seq"}
//             as each is handed to send(), {"op":"ack","seq","offset"} or {"op":"fail","seq","error"}
//             from its callback, and {"op":"streamed"} at the end (tests/kafka/partitions.py)
//   transform {input, output, group_id, transactional_id, abort_every?} consume-transform-produce: a
//             read_committed classic group member and a transactional producer; each poll's
//             records go to output (same partition, value "<input value>:<n>:<input
//             offset>") in transaction n with their offsets (sendOffsetsToTransaction),
//             except that every abort_every-th is aborted on purpose once they are sent;
//             on an error the transaction is aborted (the producer replaced when that fails
//             too) and the consumer seeks to
//             the group's committed offsets. Prints {"op":"txn","n","outcome","restarted"}
//             (outcome committed, aborted: given up before the commit was asked, unknown:
//             the commit was asked and failed) until stdin yields a line, then {"op":"left"}
//   timings   {topic, group_protocol, rounds, partitions} the measurements of
//             tests/kafka/kip848_timings.py, made the same way inside this JVM (after its
//             start): start of a fresh group's only member to its first record, and a third
//             member's start until three members hold partitions/3 each
//             -> {"op":"timings", "first": [s, ...], "third": [s, ...]}
//   admin     {client_id?, rounds?, hold_ms?} an Admin with enable.metrics.push=true (its
//             default is false, KIP-1076) making rounds (default 1) of describeCluster and
//             listTopics, asking its clientInstanceId (up to 10 s), then staying open
//             hold_ms before close -> {"op":"admin", "instance_id"} (Kafka's Uuid string)
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Interop {
    static final ObjectMapper JSON = new ObjectMapper();
    static final Base64.Encoder B64E = Base64.getEncoder();
    static final Base64.Decoder B64D = Base64.getDecoder();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        JsonNode spec = JSON.readTree(in.readLine());
        String bootstrap = spec.get("bootstrap").asText();
        for (JsonNode op : spec.get("ops")) {
            switch (op.get("op").asText()) {
                case "produce" -> produce(bootstrap, op);
                case "consume" -> consume(bootstrap, op);
                case "group" -> group(bootstrap, op, in);
                case "partition" -> partition(op);
                case "share" -> share(bootstrap, op, in);
                case "timings" -> timings(bootstrap, op);
                case "stream" -> stream(bootstrap, op, in);
                case "admin" -> admin(bootstrap, op);
                case "transform" -> transform(bootstrap, op, in);
                default -> throw new IllegalArgumentException("unknown op " + op.get("op"));
            }
        }
    }

    static void emit(ObjectNode node) {
        System.out.println(node.toString());
        System.out.flush();
    }

    static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : B64D.decode(node.asText());
    }

    static String b64(byte[] b) {
        return b == null ? null : B64E.encodeToString(b);
    }

    static ProducerRecord<byte[], byte[]> record(String topic, JsonNode r) {
        List<Header> headers = new ArrayList<>();
        for (JsonNode h : r.withArray("headers")) headers.add(new RecordHeader(h.get(0).asText(), bytes(h.get(1))));
        Integer partition = r.hasNonNull("partition") ? r.get("partition").asInt() : null;
        Long ts = r.hasNonNull("timestamp") ? r.get("timestamp").asLong() : null;
        return new ProducerRecord<>(topic, partition, ts, bytes(r.get("key")), bytes(r.get("value")), headers);
    }

    static void produce(String bootstrap, JsonNode op) throws Exception {
        String topic = op.get("topic").asText();
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, op.path("compression").asText("none"));
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(op.path("idempotent").asBoolean(false)));
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20"); // several records per batch: the codec matters
        String txid = op.path("transactional_id").asText(null);
        if (txid != null) p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        if (op.hasNonNull("client_id")) p.put(ProducerConfig.CLIENT_ID_CONFIG, op.get("client_id").asText());
        ArrayNode acks = JSON.createArrayNode();
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (txid != null) {
                producer.initTransactions();
                for (JsonNode txn : op.get("transactions")) {
                    producer.beginTransaction();
                    List<Future<RecordMetadata>> futures = new ArrayList<>();
                    for (JsonNode r : txn.get("records")) futures.add(producer.send(record(topic, r)));
                    producer.flush();
                    for (Future<RecordMetadata> f : futures) acks.add(ack(f.get()));
                    if (txn.get("commit").asBoolean()) producer.commitTransaction();
                    else producer.abortTransaction();
                }
            } else {
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                for (JsonNode r : op.get("records")) futures.add(producer.send(record(topic, r)));
                producer.flush();
                for (Future<RecordMetadata> f : futures) acks.add(ack(f.get()));
            }
            // Stay open a while (KIP-714's tests: the producer gets its metrics
            // subscription and pushes before close()).
            Thread.sleep(op.path("hold_ms").asLong(0));
        }
        ObjectNode out = JSON.createObjectNode().put("op", "produced").put("topic", topic);
        out.set("acks", acks);
        emit(out);
    }

    static void stream(String bootstrap, JsonNode op, BufferedReader in) throws Exception {
        String topic = op.get("topic").asText();
        int partitions = op.get("partitions").asInt();
        long interval = op.get("interval_ms").asLong();
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        AtomicBoolean stop = new AtomicBoolean();
        Thread stopper = new Thread(() -> {
            try { in.readLine(); } catch (Exception e) { /* EOF or error: stop either way */ }
            stop.set(true);
        });
        stopper.setDaemon(true);
        stopper.start();
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (long seq = 0; !stop.get(); seq++) {
                final long n = seq;
                byte[] value = String.format("%08d", n).getBytes(StandardCharsets.US_ASCII);
                emit(JSON.createObjectNode().put("op", "sent").put("seq", n));
                producer.send(new ProducerRecord<>(topic, (int) (n % partitions), null, value), (m, e) -> {
                    if (e == null) emit(JSON.createObjectNode().put("op", "ack").put("seq", n).put("offset", m.offset()));
                    else emit(JSON.createObjectNode().put("op", "fail").put("seq", n)
                            .put("error", e.getClass().getSimpleName()));
                });
                Thread.sleep(interval);
            }
            producer.flush();
        }
        emit(JSON.createObjectNode().put("op", "streamed"));
    }

    static ArrayNode ack(RecordMetadata m) {
        return JSON.createArrayNode().add(m.partition()).add(m.offset()).add(m.timestamp());
    }

    static Properties consumerProps(String bootstrap, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return p;
    }

    static ObjectNode recordJson(ConsumerRecord<byte[], byte[]> r) {
        ObjectNode o = JSON.createObjectNode().put("op", "record").put("topic", r.topic())
                .put("partition", r.partition()).put("offset", r.offset())
                .put("timestamp", r.timestamp()).put("timestamp_type", r.timestampType().name)
                .put("key", b64(r.key())).put("value", b64(r.value()));
        ArrayNode headers = o.putArray("headers");
        for (Header h : r.headers()) headers.add(JSON.createArrayNode().add(h.key()).add(b64(h.value())));
        return o;
    }

    static void consume(String bootstrap, JsonNode op) {
        String topic = op.get("topic").asText();
        Properties p = consumerProps(bootstrap, op.path("isolation").asText("read_committed"));
        if (op.hasNonNull("client_id")) p.put(ConsumerConfig.CLIENT_ID_CONFIG, op.get("client_id").asText());
        int count = 0;
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, info.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            // With "count": read at least that many records first. The end offsets alone are
            // not enough: a partition whose leader just moved (a broker stalled on a loaded
            // machine) may report a high watermark behind the old leader's for a moment.
            int expect = op.path("count").asInt(-1);
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (count < expect) {
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> at = new HashMap<>();
                    for (TopicPartition tp : tps) at.put(tp, consumer.position(tp));
                    throw new IllegalStateException("read " + count + " of " + expect + " in 60 s: positions "
                            + at + ", end offsets " + consumer.endOffsets(tps));
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    emit(recordJson(r));
                    count++;
                }
            }
            // Then up to the end (so records beyond those expected show): endOffsets follows
            // isolation.level, the LSO under read_committed.
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
                if (System.nanoTime() > deadline) throw new IllegalStateException("not caught up in 60 s: " + end);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    emit(recordJson(r));
                    count++;
                }
            }
        }
        emit(JSON.createObjectNode().put("op", "consumed").put("topic", topic).put("count", count));
    }

    static void group(String bootstrap, JsonNode op, BufferedReader in) {
        String topic = op.get("topic").asText();
        Properties p = consumerProps(bootstrap, op.path("isolation").asText("read_committed"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, op.get("group_id").asText());
        boolean tolerate = op.path("tolerate_errors").asBoolean(false);
        if (op.has("request_timeout_ms"))
            p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, op.get("request_timeout_ms").asText());
        // "consumer" (KIP-848) when the spec says so; its session timeout is the broker's.
        String protocol = op.has("group_protocol") ? op.get("group_protocol").asText() : "classic";
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        AtomicBoolean stop = new AtomicBoolean();
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            Thread stopper = new Thread(() -> {
                try { in.readLine(); } catch (Exception e) { /* EOF or error: leave either way */ }
                stop.set(true);
                consumer.wakeup();
            });
            stopper.setDaemon(true);
            stopper.start();
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {}
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    ObjectNode o = JSON.createObjectNode().put("op", "assigned");
                    ArrayNode a = o.putArray("partitions");
                    consumer.assignment().stream().map(TopicPartition::partition).sorted().forEach(a::add);
                    o.put("member_id", consumer.groupMetadata().memberId());
                    emit(o);
                }
            });
            while (!stop.get()) {
                try {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    for (ConsumerRecord<byte[], byte[]> r : records) emit(recordJson(r));
                    if (!records.isEmpty() && !tolerate) {
                        consumer.commitSync();
                        emit(JSON.createObjectNode().put("op", "committed"));
                    } else if (!records.isEmpty()) {
                        Map<TopicPartition, OffsetAndMetadata> offsets = nextOffsets(records);
                        try {
                            consumer.commitSync(offsets);
                        } catch (org.apache.kafka.common.errors.WakeupException e) {
                            throw e;
                        } catch (org.apache.kafka.common.KafkaException e) {
                            emit(JSON.createObjectNode().put("op", "commit_failed")
                                    .put("error", e.getClass().getSimpleName()));
                            continue;
                        }
                        ObjectNode o = JSON.createObjectNode().put("op", "committed");
                        ArrayNode a = o.putArray("offsets");
                        offsets.forEach((tp, m) -> a.add(JSON.createArrayNode().add(tp.partition()).add(m.offset())));
                        emit(o);
                    }
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    break;
                }
            }
        }
        emit(JSON.createObjectNode().put("op", "left"));
    }

    static Map<TopicPartition, OffsetAndMetadata> nextOffsets(ConsumerRecords<byte[], byte[]> records) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : records)
            offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
        return offsets;
    }

    /** The next offsets with the leader epoch of the last record read, as Kafka Streams commits
     *  them: a consumer going back to them checks them against the leader's log (KIP-320). */
    static Map<TopicPartition, OffsetAndMetadata> nextOffsetsWithEpochs(ConsumerRecords<byte[], byte[]> records) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : records)
            offsets.put(new TopicPartition(r.topic(), r.partition()),
                    new OffsetAndMetadata(r.offset() + 1, r.leaderEpoch(), ""));
        return offsets;
    }

    static final class AbortOnPurpose extends Exception {}

    static KafkaProducer<byte[], byte[]> transactional(String bootstrap, String txid) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txid);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        KafkaProducer<byte[], byte[]> producer =
            new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        try {
            producer.initTransactions();
        } catch (RuntimeException e) {
            producer.close(Duration.ZERO);
            throw e;
        }
        return producer;
    }

    static void transform(String bootstrap, JsonNode op, BufferedReader in) throws Exception {
        String input = op.get("input").asText();
        String output = op.get("output").asText();
        String txid = op.get("transactional_id").asText();
        int abortEvery = op.path("abort_every").asInt(0);
        Properties p = consumerProps(bootstrap, "read_committed");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, op.get("group_id").asText());
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        AtomicBoolean stop = new AtomicBoolean();
        KafkaProducer<byte[], byte[]> producer = null;
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            Thread stopper = new Thread(() -> {
                try { in.readLine(); } catch (Exception e) { /* EOF or error: leave either way */ }
                stop.set(true);
                consumer.wakeup();
            });
            stopper.setDaemon(true);
            stopper.start();
            consumer.subscribe(List.of(input));
            long n = 0;
            boolean restarted = false;
            while (!stop.get()) {
                if (producer == null) {
                    try {
                        producer = transactional(bootstrap, txid);
                    } catch (org.apache.kafka.common.KafkaException e) {
                        continue; // the coordinator is away: try again
                    }
                }
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    break;
                }
                if (records.isEmpty()) continue;
                n++;
                String outcome;
                boolean committing = false;
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        byte[] v = (new String(r.value(), StandardCharsets.US_ASCII) + ":" + n + ":"
                                + r.offset()).getBytes(StandardCharsets.US_ASCII);
                        producer.send(new ProducerRecord<>(output, r.partition(), null, v));
                    }
                    producer.sendOffsetsToTransaction(nextOffsetsWithEpochs(records), consumer.groupMetadata());
                    if (abortEvery > 0 && n % abortEvery == 0) throw new AbortOnPurpose();
                    committing = true;
                    producer.commitTransaction();
                    emit(JSON.createObjectNode().put("op", "txn").put("n", n).put("outcome", "committed")
                            .put("restarted", restarted));
                    restarted = false;
                    continue;
                } catch (org.apache.kafka.common.KafkaException | IllegalStateException | AbortOnPurpose e) {
                    outcome = committing ? "unknown" : "aborted";
                }
                try {
                    producer.abortTransaction();
                } catch (org.apache.kafka.common.KafkaException | IllegalStateException e) {
                    // Fatal (fenced, ...) or the abort failed: the next producer's
                    // initTransactions fences this one and aborts its transaction.
                    producer.close(Duration.ZERO);
                    producer = null;
                    restarted = true;
                }
                emit(JSON.createObjectNode().put("op", "txn").put("n", n).put("outcome", outcome)
                        .put("restarted", restarted));
                restarted = false;
                while (!stop.get()) {
                    try {
                        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
                        for (TopicPartition tp : consumer.assignment()) {
                            OffsetAndMetadata m = committed.get(tp);
                            // With the committed leader epoch: validated before fetching (KIP-320).
                            consumer.seek(tp, m == null ? new OffsetAndMetadata(0) : m);
                        }
                        break;
                    } catch (org.apache.kafka.common.errors.WakeupException e) {
                        break;
                    } catch (org.apache.kafka.common.KafkaException e) {
                        // the coordinator is away: ask again
                    }
                }
            }
        } finally {
            if (producer != null) producer.close(Duration.ofSeconds(5));
        }
        emit(JSON.createObjectNode().put("op", "left"));
    }

    // One group member polling in its own thread (a KafkaConsumer is single-threaded); its
    // assignment is published for the measuring thread to sample.
    static final class Member implements AutoCloseable {
        final AtomicBoolean stop = new AtomicBoolean();
        final java.util.concurrent.atomic.AtomicReference<Set<TopicPartition>> assigned =
            new java.util.concurrent.atomic.AtomicReference<>(Set.of());
        final java.util.concurrent.atomic.AtomicLong firstRecordNanos = new java.util.concurrent.atomic.AtomicLong();
        final Thread thread;

        Member(String bootstrap, String group, String protocol, String topic) {
            Properties p = consumerProps(bootstrap, "read_uncommitted");
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
            thread = new Thread(() -> {
                try (KafkaConsumer<byte[], byte[]> c =
                        new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    c.subscribe(List.of(topic));
                    while (!stop.get()) {
                        ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(100));
                        if (!records.isEmpty()) firstRecordNanos.compareAndSet(0, System.nanoTime());
                        assigned.set(Set.copyOf(c.assignment()));
                    }
                }
            });
            thread.start();
        }

        public void close() throws InterruptedException {
            stop.set(true);
            thread.join();
        }
    }

    static boolean even(List<Member> members, int partitions) {
        Set<TopicPartition> all = new HashSet<>();
        for (Member m : members) {
            Set<TopicPartition> s = m.assigned.get();
            if (s.size() != partitions / members.size()) return false;
            all.addAll(s);
        }
        return all.size() == partitions;
    }

    static void timings(String bootstrap, JsonNode op) throws Exception {
        String topic = op.get("topic").asText();
        String protocol = op.get("group_protocol").asText();
        int rounds = op.get("rounds").asInt();
        int partitions = op.get("partitions").asInt();
        ObjectNode out = JSON.createObjectNode().put("op", "timings");
        ArrayNode first = out.putArray("first");
        ArrayNode third = out.putArray("third");
        for (int r = 0; r < rounds; r++) {
            long t0 = System.nanoTime();
            try (Member m = new Member(bootstrap, "jt-" + UUID.randomUUID(), protocol, topic)) {
                while (m.firstRecordNanos.get() == 0) Thread.sleep(1);
                first.add((m.firstRecordNanos.get() - t0) / 1e9);
            }
        }
        for (int r = 0; r < rounds; r++) {
            String group = "jt-" + UUID.randomUUID();
            try (Member a = new Member(bootstrap, group, protocol, topic);
                 Member b = new Member(bootstrap, group, protocol, topic)) {
                while (!even(List.of(a, b), partitions)) Thread.sleep(10);
                long t0 = System.nanoTime();
                try (Member c = new Member(bootstrap, group, protocol, topic)) {
                    while (!even(List.of(a, b, c), partitions)) Thread.sleep(10);
                    third.add((System.nanoTime() - t0) / 1e9);
                }
            }
        }
        emit(out);
    }

    static void admin(String bootstrap, JsonNode op) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.metrics.push", "true");
        if (op.hasNonNull("client_id")) p.put("client.id", op.get("client_id").asText());
        String instance;
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(p)) {
            for (int i = 0; i < op.path("rounds").asInt(1); i++) {
                admin.describeCluster().nodes().get();
                admin.listTopics().names().get();
            }
            org.apache.kafka.common.Uuid id = admin.clientInstanceId(Duration.ofSeconds(10));
            instance = id.toString();
            Thread.sleep(op.path("hold_ms").asLong(0));
        }
        emit(JSON.createObjectNode().put("op", "admin").put("instance_id", instance));
    }

    static void partition(JsonNode op) {
        int n = op.get("partitions").asInt();
        ArrayNode picked = JSON.createArrayNode();
        for (JsonNode k : op.get("keys")) picked.add(BuiltInPartitioner.partitionForKey(bytes(k), n));
        ObjectNode o = JSON.createObjectNode().put("op", "partitions");
        o.set("picked", picked);
        emit(o);
    }

    static void share(String bootstrap, JsonNode op, BufferedReader in) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, op.get("group_id").asText());
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, op.path("max_poll_records").asText("500"));
        AtomicBoolean stop = new AtomicBoolean();
        try (KafkaShareConsumer<byte[], byte[]> consumer =
                new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            Thread stopper = new Thread(() -> {
                try { in.readLine(); } catch (Exception e) { /* EOF or error: leave either way */ }
                stop.set(true);
                consumer.wakeup();
            });
            stopper.setDaemon(true);
            stopper.start();
            consumer.subscribe(List.of(op.get("topic").asText()));
            boolean started = false;
            while (!stop.get()) {
                try {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    if (!started) {
                        started = true;
                        emit(JSON.createObjectNode().put("op", "share_started"));
                    }
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        ObjectNode o = recordJson(r);
                        o.put("delivery_count", r.deliveryCount().map(Short::intValue).orElse(-1));
                        emit(o);
                    }
                    if (!records.isEmpty()) {
                        ObjectNode o = JSON.createObjectNode().put("op", "share_committed");
                        ArrayNode errors = o.putArray("errors");
                        consumer.commitSync().forEach((tip, err) -> err.ifPresent(
                                e -> errors.add(tip.topicPartition() + ": " + e)));
                        emit(o);
                    }
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    break;
                }
            }
        }
        emit(JSON.createObjectNode().put("op", "left"));
    }
}
