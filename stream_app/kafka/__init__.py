"""Kafka plumbing: client options, the topic list and its creation, the partitioning
contract, bounded broker calls."""
