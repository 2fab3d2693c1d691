"""dataset_crc.py — CRC-32C as lstmd's dataset files use it (worker/data/dataset.h), for tests that
decode prepared datasets or patch them and need the checksums right again, and the fill record
of their headers (--missing). Standard library only.
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


def fill_record(raw):
    """'METHOD COUNT' of the fill record ("FILL", u32 method, u64 values filled) that a series or
    numeric classify header holds after its statistics; 'none' when the rest of the header is zero
    padding (prepared without --missing), 'garbage' when it is neither."""
    kind, hb, width, classes = (struct.unpack_from('<I', raw, at)[0] for at in (12, 20, 32, 40))
    series = kind == 2
    n = 64
    for _ in range(width if series else classes):  # column names or labels: u8 length + bytes
        n += 1 + raw[n]
    n += 8 * width if series else 8  # f32 mean and std of each column, or of all values
    if n + 16 <= hb and raw[n:n + 4] == b'FILL':
        return '%d %d' % struct.unpack_from('<IQ', raw, n + 4)
    return 'none' if not any(raw[n:hb]) else 'garbage'
