"""``AdminConfig``: the shared client settings plus the admin client's own."""

from __future__ import annotations

from pydantic import Field

from aiokafka_ng.config import ClientConfig

__all__ = ["AdminConfig"]


class AdminConfig(ClientConfig):
    """Admin client settings; bad values raise ``ConfigError`` naming every bad key.

    ``default_api_timeout_ms`` bounds a whole operation, retries included, when the call
    does not pass its own ``timeout_ms`` (Java's ``default.api.timeout.ms``).
    """

    client_id: str | None = "aiokafka-ng-admin"
    default_api_timeout_ms: int = Field(default=60000, gt=0)
    #: KIP-714: push the admin client's metrics to the brokers when they subscribe to them
    #: (a client-metrics subscription on the cluster); Java's ``enable.metrics.push``, off
    #: by default for an admin client as in Java's (whose push came with KIP-1076): admin
    #: clients are often short-lived (scripts, CLI commands), each would ask for a
    #: subscription for nothing. Nothing is sent to brokers without a telemetry plugin.
    enable_metrics_push: bool = False

    def _cross_check(self) -> dict[str, str]:
        errors = super()._cross_check()
        # Java's rule: an operation must be allowed at least one whole request. Set too low
        # by the user, that is an error; only by default, it silently follows the request
        # timeout.
        if self.default_api_timeout_ms < self.request_timeout_ms:
            if "default_api_timeout_ms" in self.model_fields_set:
                errors["default_api_timeout_ms"] = "must be >= request_timeout_ms"
            else:
                self._force(default_api_timeout_ms=self.request_timeout_ms)
        return errors
