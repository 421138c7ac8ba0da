// Capture from C++ (docs/heaps.md): while the thread has captured the heap,
// operator new (plain, array, aligned), std::vector's and std::string's
// buffers land in it; delete and the containers' destructors free them with
// no special code, after the capture has ended too.
#include <locus.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#define CHECK(c) do { if (!(c)) { std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); std::exit(1); } } while (0)

struct alignas(256) Tile { double v[64]; };

int main() {
  locus_heap_config_t cfg = LOCUS_HEAP_CONFIG_INIT;
  cfg.name = "c++";
  locus_heap_t *h = locus_heap_create(&cfg);
  CHECK(h);
  {
    locus_heap_t *prev = locus_heap_capture(h);
    int *n = new int(42);
    double *arr = new double[100000];                 // 800 KB
    Tile *t = new Tile();                             // operator new(size, align_val_t)
    std::vector<double> v(1000, 1.5);
    std::string s(200, 'x');                          // past the small-string buffer
    std::map<int, std::string> m{{1, std::string(100, 'a')}, {2, std::string(100, 'b')}};
    auto u = std::make_unique<std::vector<int>>(50000, 7);
    locus_heap_capture(prev);

    CHECK(locus_heap_of(n) == h && locus_heap_of(arr) == h && locus_heap_of(t) == h);
    CHECK(reinterpret_cast<uintptr_t>(t) % alignof(Tile) == 0);
    CHECK(locus_heap_of(v.data()) == h && locus_heap_of(s.data()) == h);
    CHECK(locus_heap_of(m.at(2).data()) == h && locus_heap_of(u.get()) == h && locus_heap_of(u->data()) == h);

    v.resize(200000);                                 // grows after the capture: a new default buffer
    CHECK(locus_heap_of(v.data()) == nullptr && v[999] == 1.5);
    s += std::string(5000, 'y');
    CHECK(locus_heap_of(s.data()) == nullptr && s[199] == 'x');

    delete n;                                         // delete works on the heap's blocks
    delete[] arr;
    delete t;
  }                                                   // the containers free their heap blocks here
  locus_stats_t st;
  CHECK(locus_heap_stats(h, &st) == 0 && st.cache_hits >= 9);
  std::printf("C++: %llu allocations under capture, all in heap '%s'\n",
              static_cast<unsigned long long>(st.cache_hits), locus_heap_name(h));
  locus_heap_destroy(h);
  return 0;
}
