"""A deterministic, allocation-heavy Python workload for the locus client tests.

Exercises object churn of many sizes: small ints/tuples/strings, growing lists
and dicts (resizes = growing reallocs), big integers, bytes buffers of MiB
size, json/regex/zlib, a word index, and threads sharing queues (blocks freed
by another thread than the one that allocated them). Prints a digest of every
phase; the output must not depend on the allocator.
"""
import collections
import hashlib
import json
import queue
import random
import re
import sys
import threading
import zlib

SCALE = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rng = random.Random(20240501)


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def phase(name, value):
    print(f"{name:<14} {value}")
    sys.stdout.flush()


# 1. Containers: many small objects, growing dicts and lists.
d = {}
for i in range(200_000 * SCALE):
    d[(i * 7919) % 1_000_003] = (i, str(i), [i] * (i % 5))
lst = sorted(d.items())[:: 997]
phase("containers", f"{len(d)} {digest(lst)}")
del d, lst

# 2. Strings: building, joining, splitting, replacing.
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
         for _ in range(50_000 * SCALE)]
text = " ".join(words)
for _ in range(3):
    text = text.replace("a", "aa").replace("aa", "a")
upper = text.upper()
index = collections.Counter(text.split())
phase("strings", f"{len(text)} {len(index)} {digest(index.most_common(20))} {hashlib.md5(upper.encode()).hexdigest()[:12]}")

# 3. Regular expressions.
pat = re.compile(r"\b([b-d]\w{2,5})([aeiou]+)\b")
found = pat.findall(text)
subst = pat.sub(lambda m: m.group(2) + m.group(1), text[:200_000])
phase("regex", f"{len(found)} {digest(found[:500])} {hashlib.sha1(subst.encode()).hexdigest()[:12]}")
del words, text, upper, found, subst

# 4. JSON round trip of a nested document.
doc = {f"k{i}": {"id": i, "tags": [f"t{j}" for j in range(i % 17)],
                 "vals": [rng.random() for _ in range(i % 31)],
                 "name": "x" * (i % 300)} for i in range(20_000 * SCALE)}
s = json.dumps(doc, sort_keys=True)
back = json.loads(s)
assert back == doc
phase("json", f"{len(s)} {hashlib.sha256(s.encode()).hexdigest()[:16]}")
del doc, s, back

# 5. Big integers: factorial and Fibonacci (large, growing digit arrays).
f = 1
for i in range(2, 3000 * SCALE):
    f *= i
a, b = 0, 1
for _ in range(20_000 * SCALE):
    a, b = b, a + b
phase("bigint", f"{f.bit_length()} {f % (10**20 + 39)} {a.bit_length()} {a % 1_000_000_007}")
del f, a, b

# 6. Large buffers: bytearrays growing to several MiB, zlib round trip.
buf = bytearray()
for i in range(4000 * SCALE):
    buf += bytes([(i * 31 + j) & 0xFF for j in range(i % 2000)])
comp = zlib.compress(bytes(buf), 6)
assert zlib.decompress(comp) == buf
chunks = [bytes(rng.getrandbits(8) for _ in range(1)) * (1 << k) for k in range(24)]
phase("buffers", f"{len(buf)} {len(comp)} {hashlib.sha256(buf).hexdigest()[:16]} {sum(map(len, chunks))}")
del buf, comp, chunks

# 7. Threads: producers build objects, consumers (other threads) drop them.
q = queue.Queue(maxsize=256)
results = [0] * 4
lock = threading.Lock()


def producer(seed, n):
    r = random.Random(seed)
    for _ in range(n):
        size = r.choice((8, 64, 500, 4096, 70_000, 300_000))
        q.put(bytes([seed & 0xFF]) * size + str(r.random()).encode())
    q.put(None)


def consumer(slot):
    total = 0
    while True:
        item = q.get()
        if item is None:
            break
        total += len(item) + item[0]
    with lock:
        results[slot] = total


N = 3000 * SCALE
prods = [threading.Thread(target=producer, args=(s, N)) for s in (1, 2)]
cons = [threading.Thread(target=consumer, args=(s,)) for s in (0, 1)]
for t in prods + cons:
    t.start()
for t in prods + cons:
    t.join()
phase("threads", f"{sum(results)}")

# 8. Sorting many small records.
recs = [(rng.randint(0, 1000), rng.random(), str(i)) for i in range(300_000 * SCALE)]
recs.sort()
phase("sort", digest(recs[:: 1000]))
print("done")
