"""Kafka's default partitioner for keyed records: murmur2 of the key bytes, as the Java producer,
Spark's Kafka writer and librdkafka's ``murmur2_random`` partitioner compute it.

Written here (25 lines) because no maintained binding exposes it: confluent-kafka keeps
librdkafka's inside the C client, ``murmurhash2`` on PyPI is unmaintained since 2022, and
kafka-python is a whole second Kafka client. Tested against Kafka's ``UtilsTest#testMurmur2``.
"""

from __future__ import annotations

import struct

_M32 = 0xFFFFFFFF
_MURMUR_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _M32
    tail = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:tail]):
        k = (k * _MURMUR_M) & _M32
        k ^= k >> 24
        k = (k * _MURMUR_M) & _M32
        h = ((h * _MURMUR_M) & _M32) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _MURMUR_M) & _M32
    h ^= h >> 13
    h = (h * _MURMUR_M) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit."""
    return number & 0x7FFFFFFF


def partition_for(key: bytes, partitions: int) -> int:
    """The default partitioner's choice for a non-null key."""
    return to_positive(murmur2(key)) % partitions
