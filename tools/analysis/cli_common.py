"""What the analysers of the locus command (align, pages) share: the error
that ends a run with a message and an exit status, and size arguments."""


class Fail(Exception):
    """A clear message for the user and the command's exit status."""

    def __init__(self, msg, status=1):
        Exception.__init__(self, msg)
        self.status = status


def parse_size(text):
    """A size such as 4096, 64K, 1M, 2MiB or 1GB (powers of 1024)."""
    t = text.strip().upper().replace("IB", "").rstrip("B")
    mult = 1
    if t and t[-1] in "KMGT":
        mult = 1 << (10 * ("KMGT".index(t[-1]) + 1))
        t = t[:-1]
    if not t.isdigit():
        raise ValueError(text)
    return int(t) * mult
