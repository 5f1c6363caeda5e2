"""Helpers shared by the golden-recording scripts in this folder."""
import hashlib


def sha256_file(path):
    """The file's SHA-256 as hex, read in 1 MiB chunks (recorded with each golden to tie it to its model)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
