// The histograms' map: the kernel's tracing_map (kernel/trace/tracing_map.c),
// lock-free for writers, from any thread or signal handler.
//
// As the kernel's: `size` elements allocated up
// front, and 2 * size buckets of open addressing. A bucket is one 64-bit
// word, (hash << 32) | (element index + 1), 0 when empty. A writer hashes
// the compound key (never 0), then probes:
//
//   bucket empty          take a private element (the one spare a lost race
//                         gave back, else the next never-used one), copy the
//                         key in, and CAS the bucket from 0 to (hash, element):
//                         claiming the bucket and publishing the element are
//                         one store. No element left: the record is dropped.
//                         CAS lost: look at what the winner put there.
//   hash == ours          compare keys; same key, found.
//   other hash            next bucket.
//
// The kernel claims the hash first and publishes the element after, and a
// writer that meets a claimed bucket without an element spins; in the
// kernel the inserter cannot be preempted, so the spin is short. Here it
// can be (and a signal handler can interrupt its own thread's insert), so
// a spinner that gave up dropped records on a loaded machine. With one CAS
// there is no such window: nothing waits on anything, and a record is
// dropped only when the table is full. A writer that loses the CAS for a
// new key gives its element back as the spare, or, if the spare slot is
// taken, leaves it unused (capacity lost, never a wrong count).
//
// Sums are relaxed atomic adds on the element. Readers (print) take every
// element a bucket publishes.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace usrtrace::hist {

// The map, shared by the histograms of one name= (and owned by one
// histogram otherwise).
struct TracingMap {
  struct Elt {
    std::atomic<uint64_t>* sums;  // one per value, hitcount first
    // The entry's variables (histogram.rst 2.2.1), then one word whose bit
    // i says variable i is set: a writer stores the values (relaxed) and
    // then ors the bits (release); a reader of another event loads the
    // bits (acquire), reads the values and clears the bits it used (read
    // once).
    std::atomic<uint64_t>* vars;
    std::atomic<uint64_t>* aux;  // the actions' per-entry words (hist.cc)
    uint8_t* key;
    char comm[16];  // the inserting thread's name (.execname), as the kernel keeps it
  };
  TracingMap(uint32_t bits, uint32_t key_bytes, size_t values, size_t variables = 0, size_t aux_words = 0)
      : size(1u << bits),
        key_size(key_bytes),
        nvals(values),
        nvars(variables),
        naux(aux_words),
        buckets(size_t{2} << bits),
        elts(size),
        keys(size_t{size} * key_size),
        sums(size_t{size} * nvals),
        var_words(nvars ? size_t{size} * (nvars + 1) : 0),
        aux_words_(size_t{size} * naux) {
    for (uint32_t i = 0; i < size; ++i) {
      elts[i].sums = &sums[size_t{i} * nvals];
      elts[i].vars = nvars ? &var_words[size_t{i} * (nvars + 1)] : nullptr;
      elts[i].aux = naux ? &aux_words_[size_t{i} * naux] : nullptr;
      elts[i].key = &keys[size_t{i} * key_size];
    }
  }

  // The element of `key`, or null: a lookup that inserts nothing (another
  // event's histogram reading this one's variables).
  // Context: the write path.
  Elt* find(const uint8_t* key) {
    const uint32_t h = hash_of(key, key_size);
    const size_t mask = buckets.size() - 1;
    size_t idx = h & mask;
    for (size_t probes = 0; probes < buckets.size(); ++probes, idx = (idx + 1) & mask) {
      // order: acquire pairs with insert()'s release CAS: the key is complete.
      const uint64_t w = buckets[idx].load(std::memory_order_acquire);
      if (w == 0) return nullptr;
      Elt* e = &elts[static_cast<uint32_t>(w) - 1];
      if (static_cast<uint32_t>(w >> 32) == h && std::memcmp(e->key, key, key_size) == 0) return e;
    }
    return nullptr;
  }

  static uint32_t hash_of(const uint8_t* key, uint32_t n) {
    uint32_t h = 2166136261u;  // FNV-1a, then mixed
    for (uint32_t i = 0; i < n; ++i) h = (h ^ key[i]) * 16777619u;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return h | 1;  // never 0, so a claimed bucket is never 0
  }

  // The element a bucket word publishes, or null for an empty bucket.
  const Elt* element(uint64_t word) const { return word ? &elts[static_cast<uint32_t>(word) - 1] : nullptr; }

  // Context: the write path (see the top of the file).
  Elt* insert(const uint8_t* key, const char* comm) {
    const uint32_t h = hash_of(key, key_size);
    const size_t mask = buckets.size() - 1;
    size_t idx = h & mask;
    uint32_t mine = 0;  // index + 1 of a private element holding our key
    for (size_t probes = 0; probes < buckets.size(); ++probes, idx = (idx + 1) & mask) {
      std::atomic<uint64_t>& b = buckets[idx];
      // order: acquire pairs with the release CAS that published the
      // bucket's element: its key is complete.
      uint64_t w = b.load(std::memory_order_acquire);
      if (w == 0) {
        if (mine == 0) {
          mine = take_element();
          if (mine == 0) break;  // full: drop
          Elt& e = elts[mine - 1];
          std::memcpy(e.key, key, key_size);
          std::memset(e.comm, 0, sizeof e.comm);
          if (comm) std::memcpy(e.comm, comm, strnlen(comm, sizeof e.comm - 1));
        }
        // order: release publishes the key and comm written above; on
        // failure, acquire reads the winner's element.
        if (b.compare_exchange_strong(w, (uint64_t{h} << 32) | mine, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
          return &elts[mine - 1];
        // Lost the race: w is the winner's word; it may be our key.
      }
      Elt* e = &elts[static_cast<uint32_t>(w) - 1];
      if (static_cast<uint32_t>(w >> 32) == h && std::memcmp(e->key, key, key_size) == 0) {
        give_back(mine);
        return e;
      }
    }
    give_back(mine);
    drops.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }

  // An unused element, as index + 1, or 0 when there is none. The load
  // before the fetch_add keeps `next` from counting up (and one day
  // wrapping around to 0) on every record a full table drops.
  uint32_t take_element() {
    // order: acquire pairs with give_back()'s release (the element's sums
    // are zero; a given-back element was never published).
    if (uint32_t s = spare.exchange(0, std::memory_order_acquire)) return s;
    if (next.load(std::memory_order_relaxed) >= size) return 0;
    const uint32_t n = next.fetch_add(1, std::memory_order_relaxed);
    return n < size ? n + 1 : 0;
  }
  void give_back(uint32_t e) {
    uint32_t empty = 0;
    if (e) spare.compare_exchange_strong(empty, e, std::memory_order_release, std::memory_order_relaxed);
  }

  // Context: control plane, with no writer inside insert() (the caller
  // paused the histograms and waited for a grace period).
  void clear() {
    for (auto& b : buckets) b.store(0, std::memory_order_relaxed);
    for (auto& s : sums) s.store(0, std::memory_order_relaxed);
    for (auto& v : var_words) v.store(0, std::memory_order_relaxed);
    for (auto& a : aux_words_) a.store(0, std::memory_order_relaxed);
    std::memset(keys.data(), 0, keys.size());
    next.store(0, std::memory_order_relaxed);
    spare.store(0, std::memory_order_relaxed);
    drops.store(0, std::memory_order_relaxed);
  }

  const uint32_t size;
  const uint32_t key_size;
  const size_t nvals;
  const size_t nvars;
  const size_t naux;
  std::vector<std::atomic<uint64_t>> buckets;  // (hash << 32) | (element index + 1)
  std::vector<Elt> elts;
  std::vector<uint8_t> keys;
  std::vector<std::atomic<uint64_t>> sums;
  std::vector<std::atomic<uint64_t>> var_words;   // nvars + 1 per element
  std::vector<std::atomic<uint64_t>> aux_words_;  // naux per element
  std::atomic<uint32_t> next{0};                  // elements never used start here
  std::atomic<uint32_t> spare{0};                 // index + 1 of one element a lost race gave back
  std::atomic<uint64_t> drops{0};                 // records not counted: the table was full
  std::string signature;                          // keys and values, for name= sharing
};

}  // namespace usrtrace::hist
