"""The streaming pipeline runtime: provisioning, the consumer, publish sinks, operator tools."""
