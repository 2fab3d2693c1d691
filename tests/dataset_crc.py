"""dataset_crc.py — CRC-32C as lstmd's dataset files use it (worker/data/dataset.h), for tests that
decode prepared datasets or patch them and need the checksums right again. Standard library only.
"""
import struct


def crc32c(b, crc=0):
    """CRC-32C (Castagnoli) of the bytes b, continuing from crc."""
    crc ^= 0xffffffff
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 & -(crc & 1))
    return crc ^ 0xffffffff


def header_crc_ok(raw, header_bytes):
    """Whether the header CRC (offset 48, computed with that field zero) matches."""
    h = bytearray(raw[:header_bytes])
    h[48:52] = b'\0\0\0\0'
    return crc32c(bytes(h)) == struct.unpack_from('<I', raw, 48)[0]


def fix_crcs(raw, header_bytes):
    """Recomputes the payload CRC (offset 44) and then the header CRC of a bytearray in place."""
    struct.pack_into('<I', raw, 44, crc32c(bytes(raw[header_bytes:])))
    raw[48:52] = b'\0\0\0\0'
    struct.pack_into('<I', raw, 48, crc32c(bytes(raw[:header_bytes])))
