// A broker-side KIP-714 receiver for tests/kafka/test_kafka_telemetry.py.
//
// Loaded into every broker as a metrics reporter (metric.reporters=TelemetryReceiver, the
// compiled class on the broker's class path). Kafka 4.4 hands client pushes to a metrics
// reporter that implements ClientTelemetryExporterProvider (the ClientTelemetry /
// ClientTelemetryReceiver pair is deprecated there); without such a reporter a broker does
// not advertise GetTelemetrySubscriptions and PushTelemetry at all.
//
// Each push becomes one JSON line appended to the file named by the broker property
// "telemetry.receiver.file": {"client_id", "instance_id", "terminating", "content_type",
// "push_interval_ms", "data"} with data the payload as the broker passes it (decompressed
// OTLP MetricsData protobuf), base64. The test decodes it with opentelemetry-proto.
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

public class TelemetryReceiver implements MetricsReporter, ClientTelemetryExporterProvider {
    private String path;

    @Override
    public void configure(Map<String, ?> configs) {
        Object file = configs.get("telemetry.receiver.file");
        if (file == null) {
            throw new IllegalArgumentException("telemetry.receiver.file is not set");
        }
        path = file.toString();
    }

    @Override
    public void init(List<KafkaMetric> metrics) {}

    @Override
    public void metricChange(KafkaMetric metric) {}

    @Override
    public void metricRemoval(KafkaMetric metric) {}

    @Override
    public void close() {}

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this::export;
    }

    private synchronized void export(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String line = "{\"client_id\":" + quote(context.authorizableRequestContext().clientId())
            + ",\"instance_id\":" + quote(payload.clientInstanceId().toString())
            + ",\"terminating\":" + payload.isTerminating()
            + ",\"content_type\":" + quote(payload.contentType())
            + ",\"push_interval_ms\":" + context.pushIntervalMs()
            + ",\"data\":" + quote(Base64.getEncoder().encodeToString(bytes)) + "}\n";
        try (FileOutputStream out = new FileOutputStream(path, true)) {
            out.write(line.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new RuntimeException(e);  // the broker answers the push INVALID_RECORD
        }
    }

    private static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
