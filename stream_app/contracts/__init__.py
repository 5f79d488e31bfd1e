"""Topic contracts as files: JSON Schemas of the wire records and an AsyncAPI document.

``catalog`` (the topics, their keys, partitions and schemas), ``asyncapi`` (the document),
``schema`` (``pufferfish schema --out DIR``; the committed copy is ``deploy/schemas/``).
"""
