// A C++ program that leans on the STL and on operator new/delete, for the
// locus client tests: run with and without LD_PRELOAD, its output must be the
// same. Deterministic: every random choice comes from a seeded generator and
// every thread's result is combined in a fixed order.
//
//   locus_client_stl [SCALE]
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

int scale = 1;

// FNV-1a over anything printable; enough to detect a corrupted byte.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  void add(const void *p, size_t n) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  }
  void add(const std::string &s) { add(s.data(), s.size()); }
  void add(uint64_t v) { add(&v, sizeof v); }
};

void report(const char *name, const Hash &h, uint64_t extra) {
  std::printf("%-12s %016llx %llu\n", name, (unsigned long long)h.h, (unsigned long long)extra);
  std::fflush(stdout);
}

void containers() {
  std::mt19937_64 rng(42);
  std::map<std::string, std::vector<int>> m;
  std::unordered_map<uint64_t, std::string> um;
  std::set<uint64_t> s;
  std::list<std::string> l;
  std::deque<uint64_t> dq;
  const int n = 200000 * scale;
  for (int i = 0; i < n; i++) {
    uint64_t r = rng();
    std::string key = "k" + std::to_string(r % 50000);
    m[key].push_back(i);
    um[r % 100003] = std::string(r % 200, char('a' + r % 26));
    s.insert(r % 1000000);
    if (r % 3 == 0) l.push_back(key + std::to_string(i));
    dq.push_back(r);
    if (dq.size() > 1000) dq.pop_front();
    if (i % 1000 == 999) {  // erase a slice of everything: mixed-size frees
      for (auto it = m.begin(); it != m.end() && std::distance(m.begin(), it) < 5;) it = m.erase(it);
      um.erase(r % 100003);
      if (!l.empty()) l.pop_front();
    }
  }
  Hash h;
  for (auto &kv : m) {
    h.add(kv.first);
    for (int v : kv.second) h.add((uint64_t)v);
  }
  std::vector<std::pair<uint64_t, std::string>> sorted(um.begin(), um.end());
  std::sort(sorted.begin(), sorted.end());
  for (auto &kv : sorted) { h.add(kv.first); h.add(kv.second); }
  for (auto v : s) h.add(v);
  for (auto &x : l) h.add(x);
  for (auto v : dq) h.add(v);
  report("containers", h, m.size() + um.size() + s.size() + l.size());
}

void strings() {
  std::string big;
  std::ostringstream os;
  for (int i = 0; i < 100000 * scale; i++) {
    big += std::to_string(i * 7);
    if (i % 10 == 0) big.append(i % 97, 'x');
    os << i << ':' << (i * 31 % 1000) << ';';
  }
  std::string s2 = os.str();
  std::vector<std::string> parts;
  std::istringstream is(s2);
  std::string tok;
  while (std::getline(is, tok, ';')) parts.push_back(tok);
  std::sort(parts.begin(), parts.end());
  Hash h;
  h.add(big);
  for (auto &p : parts) h.add(p);
  // Shrink and regrow: realloc-like traffic through std::string.
  for (int i = 0; i < 50; i++) {
    big.resize(big.size() / 2);
    big.shrink_to_fit();
    big += big;
  }
  h.add(big);
  report("strings", h, parts.size());
}

struct Node {
  uint64_t value;
  std::vector<std::shared_ptr<Node>> kids;
  std::weak_ptr<Node> parent;
  std::string label;
};

void shared_pointers() {
  std::mt19937 rng(7);
  Hash h;
  uint64_t count = 0;
  for (int round = 0; round < 20 * scale; round++) {
    auto root = std::make_shared<Node>();
    std::vector<std::shared_ptr<Node>> all{root};
    for (int i = 0; i < 5000; i++) {
      auto parent = all[rng() % all.size()];
      auto kid = std::make_shared<Node>();
      kid->value = rng();
      kid->parent = parent;
      kid->label.assign(kid->value % 64, 'n');
      parent->kids.push_back(kid);
      all.push_back(std::move(kid));
    }
    // Drop random subtrees, then walk what is left.
    for (int i = 0; i < 200; i++) {
      auto &n = all[rng() % all.size()];
      if (!n->kids.empty()) n->kids.erase(n->kids.begin());
    }
    all.clear();
    std::function<void(const Node &)> walk = [&](const Node &n) {
      h.add(n.value);
      h.add(n.label);
      count++;
      for (auto &k : n.kids) walk(*k);
    };
    walk(*root);
  }
  report("shared_ptr", h, count);
}

struct alignas(64) Line { uint64_t v[8]; };
struct alignas(4096) Page { unsigned char b[4096]; };

void operators() {
  Hash h;
  uint64_t bad = 0;
  std::vector<Line *> lines;
  std::vector<Page *> pages;
  std::vector<char *> arrays;
  for (int i = 0; i < 20000 * scale; i++) {
    Line *l = new Line;
    if ((uintptr_t)l % 64) bad++;
    l->v[0] = i;
    lines.push_back(l);
    if (i % 50 == 0) {
      Page *p = new Page;
      if ((uintptr_t)p % 4096) bad++;
      p->b[0] = (unsigned char)i;
      pages.push_back(p);
    }
    char *a = new (std::nothrow) char[(i % 5000) + 1];
    if (!a) bad++;
    else a[i % 5000] = (char)i;
    arrays.push_back(a);
  }
  for (auto *l : lines) { h.add(l->v[0]); delete l; }
  for (auto *p : pages) { h.add(p->b[0]); delete p; }
  for (size_t i = 0; i < arrays.size(); i++) { h.add((uint64_t)(unsigned char)arrays[i][i % 5000]); delete[] arrays[i]; }
  // Vectors growing to tens of MiB (large blocks, growth by doubling).
  std::vector<uint64_t> v;
  for (uint64_t i = 0; i < 4000000ull * scale; i++) v.push_back(i * i);
  h.add(std::accumulate(v.begin(), v.end(), (uint64_t)0));
  report("operators", h, bad);
  if (bad) std::exit(3);
}

// Threads: producers allocate messages, consumers (other threads) free them.
void threads() {
  const int producers = 3, consumers = 3, per = 30000 * scale;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<std::string>> q;
  int done = 0;
  std::vector<uint64_t> sums(consumers, 0);
  std::vector<std::thread> ts;
  for (int p = 0; p < producers; p++)
    ts.emplace_back([&, p] {
      std::mt19937 rng(100 + p);
      for (int i = 0; i < per; i++) {
        size_t len = (rng() % 8 == 0) ? 20000 + rng() % 200000 : rng() % 300;
        auto msg = std::make_unique<std::string>(len, char('A' + p));
        std::lock_guard<std::mutex> g(mu);
        q.push_back(std::move(msg));
        cv.notify_one();
      }
      std::lock_guard<std::mutex> g(mu);
      done++;
      cv.notify_all();
    });
  for (int c = 0; c < consumers; c++)
    ts.emplace_back([&, c] {
      for (;;) {
        std::unique_ptr<std::string> msg;
        {
          std::unique_lock<std::mutex> g(mu);
          cv.wait(g, [&] { return !q.empty() || done == producers; });
          if (q.empty()) return;
          msg = std::move(q.front());
          q.pop_front();
        }
        sums[c] += msg->size() + (msg->empty() ? 0 : (unsigned char)msg->back());
      }
    });
  for (auto &t : ts) t.join();
  // Per-thread maps built in parallel, merged in thread order.
  std::vector<std::map<int, std::string>> parts(4);
  std::vector<std::thread> ws;
  for (int t = 0; t < 4; t++)
    ws.emplace_back([&, t] {
      for (int i = 0; i < 50000 * scale; i++) parts[t][i * 4 + t] = std::to_string(i * t);
    });
  for (auto &t : ws) t.join();
  std::map<int, std::string> merged;
  for (auto &p : parts) merged.insert(p.begin(), p.end());
  parts.clear();
  Hash h;
  for (auto &kv : merged) { h.add((uint64_t)kv.first); h.add(kv.second); }
  uint64_t total = 0;
  for (auto s : sums) total += s;
  report("threads", h, total);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 1) scale = std::atoi(argv[1]);
  if (scale < 1) scale = 1;
  containers();
  strings();
  shared_pointers();
  operators();
  threads();
  std::printf("done\n");
  return 0;
}
