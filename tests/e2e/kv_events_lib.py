"""Reading pagoda's --kv-events stream (vLLM's KV event wire format) from Python: the block hash
as llm-d's KV-cache indexer defines it (low 64 bits of SHA-256 over canonical CBOR of
[parent, token ids, extra], the root over CBOR of the seed text), a subscriber that decodes the
three-frame messages (topic, big-endian sequence number, msgpack batch), and a view of one
server's cached blocks rebuilt from the events alone. Used by kv_events_check.py and the
scale-out router (scripts/prefix_router.py)."""
import hashlib
import struct


def _cbor_head(major, v):
    if v < 24:
        return bytes([major << 5 | v])
    for ai, n in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if v < 1 << (8 * n):
            return bytes([major << 5 | ai]) + v.to_bytes(n, "big")
    raise ValueError(v)


def _cbor(x):
    if x is None:
        return b"\xf6"
    if isinstance(x, int):
        return _cbor_head(0, x)
    if isinstance(x, str):
        b = x.encode()
        return _cbor_head(3, len(b)) + b
    return _cbor_head(4, len(x)) + b"".join(_cbor(i) for i in x)


def _low64(b):
    return int.from_bytes(hashlib.sha256(b).digest()[24:], "big")


def root_hash(seed=""):
    return _low64(_cbor(seed))


def block_hash(parent, tokens, extra=None):
    return _low64(_cbor([parent, list(tokens), extra]))


def prompt_hashes(tokens, block_size, seed=""):
    """The hashes of a prompt's full blocks, first block first."""
    out, parent = [], root_hash(seed)
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_hash(parent, tokens[i:i + block_size])
        out.append(parent)
    return out


class CacheView:
    """One server's cached block hashes, from its events alone."""

    def __init__(self):
        self.blocks = set()
        self.next_seq = None
        self.gaps = 0
        self.stored = self.removed = self.cleared = 0
        self.bad_hashes = 0  # BlockStored whose hash is not the indexer's over its tokens

    def apply(self, seq, batch, check_hashes=False, seed=""):
        if self.next_seq is not None and seq != self.next_seq:
            self.gaps += 1
        self.next_seq = seq + 1
        _ts, events = batch[0], batch[1]
        for ev in events:
            tag = ev[0]
            if tag == "BlockStored":
                hashes, parent, tokens, block_size = ev[1], ev[2], ev[3], ev[4]
                if check_hashes:  # base-model blocks (the check runs without adapters)
                    p = root_hash(seed) if parent is None else parent
                    for i, h in enumerate(hashes):
                        want = block_hash(p, tokens[i * block_size:(i + 1) * block_size])
                        self.bad_hashes += want != h
                        p = h
                self.blocks.update(hashes)
                self.stored += len(hashes)
            elif tag == "BlockRemoved":
                self.blocks.difference_update(ev[1])
                self.removed += len(ev[1])
            elif tag == "AllBlocksCleared":
                self.blocks.clear()
                self.cleared += 1


def decode(frames):
    """(topic, seq, batch) of one message."""
    import msgpack
    topic, seq, payload = frames
    return topic.decode(), struct.unpack(">Q", seq)[0], msgpack.unpackb(payload, raw=False)
