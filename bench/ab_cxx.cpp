// Allocator-bound C++ objects: new/delete as a C++ code does them.  One thread
// keeps --live (65536) polymorphic objects of 16 - 512 B, sizes drawn from a
// skewed distribution (most objects are small: 16-64 B make 70 % of them),
// and replaces a random one per operation (delete through the base class,
// i.e. a virtual destructor and, with g++'s default -fsized-deallocation,
// sized operator delete); every fourth operation also touches a
// std::map<uint64_t, std::string> of --map (16384) entries: inserts a key with
// a string of 16 - 200 characters (a map node and a string buffer) and erases
// another one; every 64th, a std::vector<uint64_t> is grown by push_back from
// empty to 16 - 1024 elements (the doubling reallocations) and dropped.
// Checks: each object's first and last words and each string's first and last
// characters, folded into checksums printed for the harness.  Metric:
// operations per second (one operation = one delete + one new, plus the
// container work it carries).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace {

const char *bench_name = "ab_cxx";

[[noreturn]] void fail(const char *reason, const char *msg, uint64_t v) {
    std::fprintf(stderr, "FAIL %s: %s (%#" PRIx64 ")\n", bench_name, msg, v);
    std::printf("RESULT name=%s check=fail reason=%s\n", bench_name, reason);
    std::fflush(stdout);
    std::exit(1);
}

uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(mix64(seed) | 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545f4914f6cdd1dULL;
    }
    size_t below(size_t n) { return (size_t)(((next() >> 32) * (uint64_t)n) >> 32); }
};

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
double cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const uint64_t TAIL_MIX = 0x9e3779b97f4a7c15ULL;

// A polymorphic object: vtable pointer, head word, payload, tail word.
struct Obj {
    uint64_t head;
    explicit Obj(uint64_t h) : head(h) {}
    virtual ~Obj() {}
    virtual uint64_t tail() const = 0;
    uint64_t check() const {
        if (tail() != (head ^ TAIL_MIX)) fail("corrupt", "object lost its head or tail word", head);
        return head;
    }
};

template <size_t N> struct Sized final : Obj {
    static_assert(N >= 24 && N % 8 == 0, "vtable + head + at least the tail word");
    uint64_t w[(N - 16) / 8]; // payload; the last word is the tail, the rest is never touched
    explicit Sized(uint64_t h) : Obj(h) { w[(N - 16) / 8 - 1] = h ^ TAIL_MIX; }
    uint64_t tail() const override { return w[(N - 16) / 8 - 1]; }
};
static_assert(sizeof(Sized<24>) == 24 && sizeof(Sized<512>) == 512, "object sizes");

// Skewed size mix (percent): typical of C++ codes' heap objects, mostly small.
struct Kind {
    int pct;
    size_t size;
};
const Kind kinds[] = {{20, 24}, {25, 32}, {15, 48}, {10, 64}, {8, 96}, {7, 128},
                      {5, 192}, {4, 256}, {3, 384}, {3, 512}};

Obj *make(int k, uint64_t h) {
    switch (k) {
    case 0: return new Sized<24>(h);
    case 1: return new Sized<32>(h);
    case 2: return new Sized<48>(h);
    case 3: return new Sized<64>(h);
    case 4: return new Sized<96>(h);
    case 5: return new Sized<128>(h);
    case 6: return new Sized<192>(h);
    case 7: return new Sized<256>(h);
    case 8: return new Sized<384>(h);
    default: return new Sized<512>(h);
    }
}

// Peak resident set of this address space (VmHWM), KiB; see common.h.
long peak_rss_kib() {
    long kib = -1;
    if (FILE *f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f))
            if (!std::strncmp(line, "VmHWM:", 6)) {
                kib = std::strtol(line + 6, nullptr, 10);
                break;
            }
        std::fclose(f);
    }
    return kib;
}

uint64_t opt(int argc, char **argv, const char *key, uint64_t dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!std::strcmp(argv[i], key)) return std::strtoull(argv[i + 1], nullptr, 0);
    return dflt;
}

std::string make_string(Rng &r, uint64_t tag) {
    size_t len = 16 + r.below(185);
    std::string s(len, 'a' + (char)(tag % 26));
    s.back() = 'A' + (char)(tag % 26);
    return s;
}

uint64_t string_check(const std::string &s) {
    if (s.size() < 16 || s.back() - 'A' != s.front() - 'a') fail("corrupt", "string lost its ends", s.size());
    return s.size() * 31 + (uint64_t)(unsigned char)s.front();
}

} // namespace

int main(int argc, char **argv) {
    bool quick = false;
    for (int i = 1; i < argc; i++)
        if (!std::strcmp(argv[i], "--quick")) quick = true;
    uint64_t seed = opt(argc, argv, "--seed", 0x5eed1234abcdULL);
    size_t live = opt(argc, argv, "--live", 65536);
    size_t mapn = opt(argc, argv, "--map", 16384);
    long ops = (long)opt(argc, argv, "--ops", quick ? 200000 : 12000000);
    if (live < 1 || mapn < 1) {
        std::fprintf(stderr, "ab_cxx: --live and --map must be > 0\n");
        return 2;
    }
    int table[100];
    {
        int i = 0, k = 0;
        for (const Kind &kd : kinds) {
            for (int j = 0; j < kd.pct; j++) table[i++] = k;
            k++;
        }
        if (i != 100) return 2;
    }
    Rng r(seed);
    uint64_t tag = 1, asum = 0, fsum = 0, ssum = 0, vsum = 0;
    std::vector<Obj *> objs(live);
    for (size_t i = 0; i < live; i++) {
        uint64_t h = tag++;
        objs[i] = make(table[r.below(100)], h);
        asum += h;
    }
    std::map<uint64_t, std::string> m;
    for (size_t i = 0; i < mapn; i++) m.emplace(r.next() % (4 * mapn), make_string(r, i));
    double t0 = now_s(), c0 = cpu_s();
    for (long k = 0; k < ops; k++) {
        size_t i = r.below(live);
        fsum += objs[i]->check();
        delete objs[i];
        uint64_t h = tag++;
        objs[i] = make(table[r.below(100)], h);
        asum += h;
        if ((k & 3) == 0) {
            auto it = m.lower_bound(r.next() % (4 * mapn));
            if (it == m.end()) it = m.begin();
            ssum += string_check(it->second);
            m.erase(it);
            m.emplace(r.next() % (4 * mapn), make_string(r, (uint64_t)k));
        }
        if ((k & 63) == 0) {
            std::vector<uint64_t> v;
            size_t n = 16 + r.below(1009);
            for (size_t j = 0; j < n; j++) v.push_back(j ^ (uint64_t)k);
            vsum += v.front() + v.back() + v.size();
        }
    }
    double el = now_s() - t0, cpu = cpu_s() - c0;
    for (Obj *o : objs) {
        fsum += o->check();
        delete o;
    }
    for (auto &kv : m) ssum += string_check(kv.second);
    if (asum != fsum) fail("checksum", "objects freed != objects allocated", fsum);
    uint64_t checksum = asum ^ mix64(ssum) ^ mix64(vsum + 1);
    std::printf("RESULT name=ab_cxx metric=throughput value=%.6g unit=ops/s better=higher check=ok "
                "live=%zu map=%zu ops=%ld time_s=%.4f cpu_s=%.4f cpu_ops_per_s=%.4g peak_rss_kib=%ld checksum=%016" PRIx64 "\n",
                (double)ops / el, live, mapn, ops, el, cpu, (double)ops / cpu, peak_rss_kib(), checksum);
    return 0;
}
