"""Local tooling, not the worker: the embedded Kafka-protocol broker (tansu) and the demo."""
