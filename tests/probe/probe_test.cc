// The dynamic probes in one process (src/probe, src/patch), driven through
// the control files as a user drives them, on functions compiled with
// plain -O2 (probe_fixture.cc). The kernel's own uprobe_events is the
// oracle for what a definition looks like: its format files and its
// error_log lines for the same text (skipped where it is not writable).
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "instance/instance.h"
#include "tracefs/tracefs.h"

extern "C" {
int probe_fixture_add(int a, const char* s);
int probe_fixture_read_global(int x);
long probe_fixture_mix(long a, long b, long c, long d, long e, long f, long g, long h);
}
int probe_fixture_throw(int x);
int probe_fixture_jump(int x);
extern std::jmp_buf probe_fixture_env;

// LeakSanitizer (the ASan build): the embedded Python of
// AUsdtProbeInALibraryLoadedLaterIsArmedAtLoad is never finalized, and
// what it holds is Python's, not ours.
extern "C" const char* __lsan_default_suppressions();
extern "C" const char* __lsan_default_suppressions() { return "leak:libpython3.11.so\n"; }

namespace {

namespace tracefs = usrtrace::tracefs;

// The calls go through a volatile pointer: the compiler cannot fold them.
int (*volatile g_add)(int, const char*) = probe_fixture_add;

std::string read(const std::string& path) {
  std::string s;
  tracefs::read_file(path, &s);
  return s;
}

long define(const std::string& line) { return tracefs::write_file("uprobe_events", line, true); }

// The trace's lines of one event, the part after "EVENT: ".
std::vector<std::string> lines_of(const std::string& event) {
  std::vector<std::string> out;
  std::string t = read("trace");
  size_t at = 0;
  const std::string key = " " + event + ": ";
  while ((at = t.find(key, at)) != std::string::npos) {
    const size_t end = t.find('\n', at);
    out.push_back(t.substr(at + key.size(), end - at - key.size()));
    at = end;
  }
  return out;
}

class Probes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(usrtrace::instance::Instance::top(), nullptr);
    tracefs::write_file("set_event", "", false);
    tracefs::write_file("uprobe_events", "", false);
    tracefs::write_file("trace", "", false);
  }
  void TearDown() override {
    tracefs::write_file("set_event", "", false);
    tracefs::write_file("uprobe_events", "", false);
  }
};

TEST_F(Probes, EntryAndReturnRecordWhatTheFunctionWasCalledWith) {
  ASSERT_GE(define("p:t/add probe_fixture_add a=%di:s32 s=+0(%si):string a1=$arg1:s32"), 0)
      << read("error_log");
  ASSERT_GE(define("r:t/add_ret probe_fixture_add rv=$retval:s32 a=$arg1:s32 s=+0($arg2):string"), 0)
      << read("error_log");
  // Defined, not enabled: no site yet, no record.
  EXPECT_NE(read("dynamic_probe_sites").find("t/add 0x"), std::string::npos);
  EXPECT_NE(read("dynamic_probe_sites").find("disarmed"), std::string::npos);
  EXPECT_EQ(g_add(1, "a"), 1 + 'a');
  ASSERT_GE(tracefs::write_file("events/t/enable", "1", false), 0);
  EXPECT_EQ(read("dynamic_probe_sites").find("disarmed"), std::string::npos) << read("dynamic_probe_sites");
  EXPECT_EQ(g_add(-5, "xyz"), -5 + 'x' + 'y' + 'z');
  EXPECT_EQ(g_add(7, ""), 7);
  tracefs::write_file("events/t/enable", "0", false);
  EXPECT_EQ(g_add(9, "q"), 9 + 'q');  // disarmed again: not recorded
  const auto in = lines_of("add"), out = lines_of("add_ret");
  ASSERT_EQ(in.size(), 2u) << read("trace");
  ASSERT_EQ(out.size(), 2u) << read("trace");
  const uintptr_t fn = reinterpret_cast<uintptr_t>(&probe_fixture_add);
  char ip[64];
  snprintf(ip, sizeof ip, "(0x%lx)", static_cast<unsigned long>(fn));
  EXPECT_EQ(in[0], std::string(ip) + " a=-5 s=\"xyz\" a1=-5");
  EXPECT_EQ(in[1], std::string(ip) + " a=7 s=\"\" a1=7");
  EXPECT_NE(out[0].find(" <- "), std::string::npos);
  EXPECT_NE(out[0].find(" rv=" + std::to_string(-5 + 'x' + 'y' + 'z') + " a=-5 s=\"xyz\""), std::string::npos)
      << out[0];
  EXPECT_NE(out[1].find(" rv=7 a=7 s=\"\""), std::string::npos) << out[1];
  // uprobe_profile: the object, the event, hits (the entry's), misses.
  const std::string prof = read("uprobe_profile");
  EXPECT_TRUE(std::regex_search(prof, std::regex(R"(  /.*probe_test add +2 +0\n)"))) << prof;
}

// A probe on a library the program has not loaded: defined pending, armed
// when dlopen loads the library (before dlopen returns), forgotten at
// dlclose (nothing written to the unmapped code), armed again at the next
// dlopen. The library is Debian's libbz2, which this test does not link.
TEST_F(Probes, APendingProbeIsArmedWhenDlopenLoadsItsLibrary) {
  if (USRTRACE_TEST_TSAN)
    GTEST_SKIP() << "the loader's hook resolves and arms in the SIGTRAP handler of the thread in dlopen "
                    "(which holds no malloc lock there), and TSan reports every allocation in a signal "
                    "handler as signal-unsafe, tens of thousands of times; the plain and ASan builds run it";
  const std::string lib = "/lib/x86_64-linux-gnu/libbz2.so.1.0";
  if (access(lib.c_str(), R_OK) != 0) GTEST_SKIP() << lib << " is not installed (libbz2-1.0)";
  ASSERT_EQ(dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr)
      << "the test needs a library not loaded yet";
  ASSERT_GE(define("r:bz/ver " + lib + ":BZ2_bzlibVersion v=+0($retval):string"), 0) << read("error_log");
  ASSERT_GE(define("p:bz/comp " + lib + ":BZ2_bzBuffToBuffCompress len=%cx:u32 block=%r8:s32"), 0)
      << read("error_log");
  // BZ2_bzflush is `xor %eax,%eax; ret`, 3 bytes: no 5-byte jump fits, a
  // punned one does (its rel32 ends in the padding after it).
  ASSERT_GE(define("p:bz/flush " + lib + ":BZ2_bzflush f=%di:x64"), 0) << read("error_log");
  EXPECT_NE(read("dynamic_probe_sites").find("bz/ver pending"), std::string::npos)
      << read("dynamic_probe_sites");
  ASSERT_GE(tracefs::write_file("events/bz/enable", "1", false), 0);
  std::string version;
  for (int round = 0; round < 2; ++round) {
    void* h = dlopen(lib.c_str(), RTLD_NOW);
    ASSERT_NE(h, nullptr) << dlerror();
    const std::string sites = read("dynamic_probe_sites");
    EXPECT_EQ(sites.find("pending"), std::string::npos) << sites;
    EXPECT_EQ(sites.find("disarmed"), std::string::npos) << sites;
    EXPECT_TRUE(std::regex_search(sites, std::regex("bz/flush 0x[0-9a-f]+ pun BZ2_bzflush"))) << sites;
    auto flush = reinterpret_cast<int (*)(void*)>(dlsym(h, "BZ2_bzflush"));
    ASSERT_TRUE(flush != nullptr);
    EXPECT_EQ(flush(reinterpret_cast<void*>(0x1234)), 0);
    auto ver = reinterpret_cast<const char* (*)()>(dlsym(h, "BZ2_bzlibVersion"));
    auto comp = reinterpret_cast<int (*)(char*, unsigned*, char*, unsigned, int, int, int)>(
        dlsym(h, "BZ2_bzBuffToBuffCompress"));
    ASSERT_TRUE(ver != nullptr && comp != nullptr);
    version = ver();
    ver();
    char in[1000], out[2000];
    std::memset(in, 'u', sizeof in);
    for (unsigned len : {100u, 1000u}) {
      unsigned out_len = sizeof out;
      EXPECT_EQ(comp(out, &out_len, in, len, 1 + static_cast<int>(len / 500), 0, 0), 0);
    }
    ASSERT_EQ(dlclose(h), 0);
    ASSERT_EQ(dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr) << "dlclose did not unload it";
    EXPECT_NE(read("dynamic_probe_sites").find("bz/ver pending"), std::string::npos)
        << read("dynamic_probe_sites");
  }
  tracefs::write_file("events/bz/enable", "0", false);
  const auto vers = lines_of("ver"), comps = lines_of("comp");
  ASSERT_EQ(vers.size(), 4u) << read("trace");
  for (const std::string& v : vers) EXPECT_NE(v.find(" v=\"" + version + "\""), std::string::npos) << v;
  const auto flushes = lines_of("flush");
  ASSERT_EQ(flushes.size(), 2u) << read("trace");
  for (const std::string& l : flushes) EXPECT_NE(l.find(" f=0x1234"), std::string::npos) << l;
  ASSERT_EQ(comps.size(), 4u) << read("trace");
  for (size_t i = 0; i < comps.size(); ++i)
    EXPECT_NE(comps[i].find(i % 2 == 0 ? " len=100 block=1" : " len=1000 block=3"), std::string::npos)
        << comps[i];
}

// A USDT probe in a library the program loads later (Debian's
// libpython3.11, its `python:gc__start` probe with a semaphore): defined
// as PATH%PROVIDER:NAME before dlopen (pending, its fields from the
// file's note), armed at load with its semaphore raised, and recording
// the generation of every collection Python's own gc.callbacks see.
TEST_F(Probes, AUsdtProbeInALibraryLoadedLaterIsArmedAtLoad) {
  if (USRTRACE_TEST_TSAN)
    GTEST_SKIP() << "the loader's hook arms in a SIGTRAP handler, whose allocations TSan reports "
                    "(APendingProbeIsArmedWhenDlopenLoadsItsLibrary); the plain and ASan builds run it";
  const std::string lib = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
  if (access(lib.c_str(), R_OK) != 0) GTEST_SKIP() << lib << " is not installed (libpython3.11)";
  ASSERT_EQ(dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr)
      << "the test needs a library not loaded yet";
  EXPECT_EQ(define("p:py/none %python:gc__start"), -ENOENT) << "no loaded object has it";
  ASSERT_GE(define("p:py/gc " + lib + "%python:gc__start gen"), 0) << read("error_log");
  EXPECT_NE(read("dynamic_probe_sites").find("py/gc pending " + lib + "%python:gc__start"), std::string::npos)
      << read("dynamic_probe_sites");
  EXPECT_NE(read("events/py/gc/format").find("field:s32 gen;"), std::string::npos)
      << read("events/py/gc/format");
  ASSERT_GE(tracefs::write_file("events/py/gc/enable", "1", false), 0);

  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  const std::string sites = read("dynamic_probe_sites");
  EXPECT_EQ(sites.find("pending"), std::string::npos) << sites;
  EXPECT_EQ(sites.find("disarmed"), std::string::npos) << sites;
  // The semaphore, as available_sdt_probes shows it, raised while armed.
  const std::string sdt = read("available_sdt_probes");
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(sdt, r, std::regex("python:gc__start " + lib + " 0x[0-9a-f]+ semaphore=(0x[0-9a-f]+)"));
    return r;
  }();
  ASSERT_EQ(m.size(), 2u) << sdt;
  const auto* semaphore = reinterpret_cast<const volatile uint16_t*>(std::stoull(m[1].str(), nullptr, 16));
  EXPECT_EQ(*semaphore, 1);
  // The same probe named without a path now finds the loaded library's site.
  ASSERT_GE(define("p:py/done %python:gc__done"), 0) << read("error_log");

  auto init = reinterpret_cast<void (*)(int)>(dlsym(h, "Py_InitializeEx"));
  auto run = reinterpret_cast<int (*)(const char*)>(dlsym(h, "PyRun_SimpleString"));
  ASSERT_TRUE(init != nullptr && run != nullptr);
  init(0);
  // Collections come from the calls below alone: what Python's start-up
  // collected is not compared, and automatic collection is off.
  ASSERT_EQ(run("import gc\ngc.disable()\n"), 0);
  tracefs::write_file("trace", "", false);
  char path[] = "/tmp/usrtrace_py_gcXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string code = std::string("gens = []\n") +
                           "gc.callbacks.append(lambda phase, info: phase == 'start' and "
                           "gens.append(info['generation']))\n"
                           "for g in (0, 1, 2, 0, 2, 1): gc.collect(g)\n"
                           "gc.callbacks.clear()\n"
                           "open('" +
                           path + "', 'w').write(' '.join(map(str, gens)))\n";
  ASSERT_EQ(run(code.c_str()), 0);
  tracefs::write_file("events/py/gc/enable", "0", false);
  EXPECT_EQ(*semaphore, 0) << "lowered when disarmed";
  std::ifstream in(path);
  std::string python_saw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  ASSERT_FALSE(python_saw.empty());
  std::string recorded;
  for (const std::string& l : lines_of("gc")) {
    const size_t at = l.find(" gen=");
    ASSERT_NE(at, std::string::npos) << l;
    recorded += (recorded.empty() ? "" : " ") + l.substr(at + 5);
  }
  EXPECT_EQ(recorded, python_saw) << read("trace");
  // Python stays loaded: an interpreter is not unloaded.
}

// A string that faults prints (fault), unquoted, as the kernel's trace does.
TEST_F(Probes, ABadReadRecordsFaultAndTheProgramGoesOn) {
  // probe_fixture_mix only adds its arguments: the probe alone reads what
  // they point to.
  ASSERT_GE(define("p:t/bad probe_fixture_mix none=+0(%di):string gone=+0(%si):u32 cross=+0(%dx):string "
                   "deep=+8(+0(%cx)):x64 ok=+0(%r8):string"),
            0)
      << read("error_log");
  ASSERT_GE(tracefs::write_file("events/t/bad/enable", "1", false), 0);
  void* none = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  // Past the user address space (TASK_SIZE): nothing can map it, where a
  // page unmapped here could be mapped again by the sanitizers' allocators.
  void* gone = reinterpret_cast<void*>(0x7ffffffff000);
  // A string that runs into an unreadable page.
  char* two =
      static_cast<char*>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(two, MAP_FAILED);
  std::memset(two + 4096 - 3, 'z', 3);
  ASSERT_EQ(mprotect(two + 4096, 4096, PROT_NONE), 0);
  static const char kOk[] = "fine";
  long (*volatile f)(long, long, long, long, long, long, long, long) = probe_fixture_mix;
  auto call = [&] {
    return f(reinterpret_cast<long>(none), reinterpret_cast<long>(gone),
             reinterpret_cast<long>(two + 4096 - 3), reinterpret_cast<long>(none),
             reinterpret_cast<long>(kOk), 0, 0, 0);
  };
  const long want = call();
  std::thread([&] { EXPECT_EQ(call(), want); }).join();  // from another thread too
  tracefs::write_file("events/t/bad/enable", "0", false);
  const auto got = lines_of("bad");
  ASSERT_EQ(got.size(), 2u) << read("trace");
  for (const std::string& g : got)
    EXPECT_NE(g.find("none=(fault) gone=0 cross=(fault) deep=0x0 ok=\"fine\""), std::string::npos) << g;
  munmap(none, 4096);
  munmap(two, 8192);
}

TEST_F(Probes, ARipRelativeFirstInstructionStillComputesRight) {
  ASSERT_GE(define("p:t/glob probe_fixture_read_global x=%di:s32"), 0) << read("error_log");
  ASSERT_GE(tracefs::write_file("events/t/glob/enable", "1", false), 0);
  int (*volatile f)(int) = probe_fixture_read_global;
  long sum = 0;
  for (int i = 0; i < 100; ++i) sum += f(i);
  tracefs::write_file("events/t/glob/enable", "0", false);
  EXPECT_EQ(sum, 7L * 4950);
  EXPECT_EQ(lines_of("glob").size(), 100u);
}

TEST_F(Probes, StackArgumentsAndStackSlots) {
  ASSERT_GE(define("p:t/mix probe_fixture_mix g=$arg7:s64 h=$arg8:s64 s1=$stack1:s64 a=$arg1:s64"), 0)
      << read("error_log");
  ASSERT_GE(tracefs::write_file("events/t/mix/enable", "1", false), 0);
  long (*volatile f)(long, long, long, long, long, long, long, long) = probe_fixture_mix;
  EXPECT_EQ(f(1, 2, 3, 4, 5, 6, 70, 80), 1 + 4 + 9 + 16 + 25 + 36 + 490 + 640);
  tracefs::write_file("events/t/mix/enable", "0", false);
  const auto got = lines_of("mix");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("g=70 h=80 s1=70 a=1"), std::string::npos) << got[0];
}

TEST_F(Probes, ExceptionsAndLongjmpThroughAReturnProbeLeaveTheProgramAsItWas) {
  ASSERT_GE(define("r:t/thr probe_fixture_throw rv=$retval:s32"), 0) << read("error_log");
  ASSERT_GE(define("r:t/jmp probe_fixture_jump rv=$retval:s32"), 0) << read("error_log");
  ASSERT_GE(tracefs::write_file("events/t/enable", "1", false), 0);
  int caught = 0, jumped = 0;
  for (int i = 0; i < 10; ++i) {
    try {
      probe_fixture_throw(i % 2 ? -1 : i);
    } catch (const std::runtime_error&) {
      ++caught;
    }
    if (setjmp(probe_fixture_env) == 0)
      probe_fixture_jump(i % 2 ? -1 : i);
    else
      ++jumped;
  }
  EXPECT_EQ(probe_fixture_throw(41), 42);
  EXPECT_EQ(probe_fixture_jump(40), 42);
  tracefs::write_file("events/t/enable", "0", false);
  EXPECT_EQ(caught, 5);
  EXPECT_EQ(jumped, 5);
  // The calls that returned were recorded, with their values.
  const auto thr = lines_of("thr"), jmp = lines_of("jmp");
  EXPECT_EQ(thr.size(), 6u) << read("trace");
  EXPECT_EQ(jmp.size(), 6u) << read("trace");
  if (!thr.empty()) {
    EXPECT_NE(thr.back().find("rv=42"), std::string::npos) << thr.back();
  }
  if (!jmp.empty()) {
    EXPECT_NE(jmp.back().find("rv=42"), std::string::npos) << jmp.back();
  }
}

// 8 threads call the probed function while the main thread arms and
// disarms it 1,000 times: every result is right (the checksum of the
// unprobed calls), nothing crashes, and the bytes are the original after.
TEST_F(Probes, ThreadsRacingTheToggleGetTheUnprobedChecksum) {
  if (USRTRACE_TEST_TSAN)
    GTEST_SKIP() << "TSan delivers the arming sweep's signal only at a thread's next intercepted call: "
                    "spinning threads never answer and every arming waits out its second (patch_test "
                    "skips its race the same way); the plain and ASan builds run it";
  std::vector<uint8_t> before(16);
  std::memcpy(before.data(), reinterpret_cast<const void*>(&probe_fixture_add), 16);
  ASSERT_GE(define("p:t/race probe_fixture_add a=%di:s32"), 0) << read("error_log");
  ASSERT_GE(define("r:t/race_ret probe_fixture_add rv=$retval:s32"), 0) << read("error_log");
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0};
  std::vector<std::thread> threads;
  std::vector<long> sums(8, 0), calls(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      long s = 0, n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const int v = g_add(t, "ab");
        if (v != t + 'a' + 'b') bad.fetch_add(1);
        s += v;
        // A yield now and then: 8 threads spinning on this 2-CPU machine
        // would answer each arming's sweep (a signal each) only when the
        // scheduler comes round to them, tens of ms.
        if (++n % 64 == 0) sched_yield();
      }
      sums[static_cast<size_t>(t)] = s;
      calls[static_cast<size_t>(t)] = n;
    });
  for (int i = 0; i < 1000; ++i) {
    ASSERT_GE(tracefs::write_file("events/t/enable", i % 2 ? "0" : "1", false), 0);
  }
  tracefs::write_file("events/t/enable", "0", false);
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  for (int t = 0; t < 8; ++t)
    EXPECT_EQ(sums[static_cast<size_t>(t)], calls[static_cast<size_t>(t)] * (t + 'a' + 'b'));
  std::vector<uint8_t> after(16);
  std::memcpy(after.data(), reinterpret_cast<const void*>(&probe_fixture_add), 16);
  EXPECT_EQ(before, after) << "disarmed, the function's bytes are its own again";
}

TEST_F(Probes, DefinitionsListRemoveAndRefuseAsTheKernel) {
  ASSERT_GE(define("p:t/one probe_fixture_add x=%di:x32"), 0);
  EXPECT_EQ(define("p:t/one probe_fixture_add"), -EEXIST);
  EXPECT_NE(read("uprobe_events").find("p:t/one probe_fixture_add x=%di:x32\n"), std::string::npos)
      << read("uprobe_events");
  EXPECT_EQ(read("dynamic_events"), read("uprobe_events"));
  ASSERT_GE(tracefs::write_file("events/t/one/enable", "1", false), 0);
  EXPECT_EQ(define("-:t/one"), -EBUSY) << "an enabled probe is busy";
  EXPECT_EQ(tracefs::write_file("uprobe_events", "", false), -EBUSY) << "> too";
  tracefs::write_file("events/t/one/enable", "0", false);
  EXPECT_GE(define("-:t/one"), 0);
  EXPECT_EQ(read("uprobe_events"), "");
  EXPECT_EQ(define("p:t/two no_such_function_here"), -ENOENT);
  EXPECT_NE(read("error_log").find("no function no_such_function_here"), std::string::npos)
      << read("error_log");
  // Default names, as the kernel makes them.
  ASSERT_GE(define("p probe_fixture_add+0"), 0);
  EXPECT_NE(read("uprobe_events").find("p:uprobes/p_probe_fixture_add_0 "), std::string::npos)
      << read("uprobe_events");
}

// A site that cannot be armed (another tool's int3 is there) fails the
// enable write with the engine's errno, as the kernel's enable fails with
// its uprobe's registration error; the event stays disabled, error_log
// says why; the set_event and events/enable paths answer the same, and
// the other events they name are enabled all the same.
TEST_F(Probes, AnEnableWhoseSiteCannotBeArmedFailsAndStaysDisabled) {
  ASSERT_GE(define("p:t/brk probe_fixture_breakpoint"), 0) << read("error_log");
  ASSERT_GE(define("p:t/ok probe_fixture_add"), 0) << read("error_log");
  EXPECT_EQ(tracefs::write_file("events/t/brk/enable", "1", false), -EBUSY);
  EXPECT_EQ(read("events/t/brk/enable"), "0\n");
  const std::string log = read("error_log");
  EXPECT_NE(log.find("t/brk: cannot arm the probe at 0x"), std::string::npos) << log;
  EXPECT_NE(log.find("there is an int3 there already"), std::string::npos) << log;
  EXPECT_NE(read("dynamic_probe_sites").find("disarmed"), std::string::npos);

  EXPECT_EQ(tracefs::write_file("set_event", "t:*", false), -EBUSY);
  EXPECT_EQ(read("events/t/brk/enable"), "0\n");
  EXPECT_EQ(read("events/t/ok/enable"), "1\n") << "the other event the token names is enabled";
  tracefs::write_file("events/t/ok/enable", "0", false);
  EXPECT_EQ(tracefs::write_file("events/t/enable", "1", false), -EBUSY);
  EXPECT_EQ(read("events/t/ok/enable"), "1\n");
  EXPECT_EQ(read("events/t/brk/enable"), "0\n");
  EXPECT_EQ(g_add(2, "b"), 2 + 'b');
  EXPECT_EQ(lines_of("ok").size(), 1u) << read("trace");
  tracefs::write_file("events/t/enable", "0", false);
  // An enable_event trigger naming it (soft mode arms the site): the
  // trigger write fails too, and the trigger is not left behind.
  EXPECT_EQ(tracefs::write_file("events/t/ok/trigger", "enable_event:t:brk", false), -EBUSY);
  EXPECT_EQ(read("events/t/ok/trigger").find("enable_event:t:brk"), std::string::npos)
      << read("events/t/ok/trigger");
  EXPECT_NE(read("error_log").find("event trigger: error: t/brk: cannot arm"), std::string::npos)
      << read("error_log");
  // Nothing left armed or enabled: both can go.
  EXPECT_GE(define("-:t/brk"), 0);
  EXPECT_GE(define("-:t/ok"), 0);
}

// ---- The kernel as the oracle.

bool kernel_writable() { return access("/sys/kernel/tracing/uprobe_events", W_OK) == 0; }

bool kernel_write(const std::string& file, const std::string& text) {
  const int fd = ::open(("/sys/kernel/tracing/" + file).c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

std::string kernel_read(const std::string& file) {
  std::ifstream in("/sys/kernel/tracing/" + file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// This program's path and the file offset of `fn`, as uprobe_events takes them.
std::string place_of(const void* fn) {
  char exe[PATH_MAX];
  if (realpath("/proc/self/exe", exe) == nullptr) return "";
  struct Arg {
    uintptr_t addr;
    unsigned long off;
  } a{reinterpret_cast<uintptr_t>(fn), 0};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* p) {
        auto* q = static_cast<Arg*>(p);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && q->addr >= lo && q->addr < lo + ph.p_filesz)
            q->off = q->addr - lo + ph.p_offset;
        }
        return 1;
      },
      &a);
  char buf[PATH_MAX + 32];
  snprintf(buf, sizeof buf, "%s:0x%lx", exe, a.off);
  return buf;
}

// The format text without its ID line.
std::string without_id(const std::string& f) {
  return std::regex_replace(f, std::regex("\nID: [0-9]+\n"), "\n");
}

TEST_F(Probes, FormatFilesAreTheKernels) {
  if (!kernel_writable()) GTEST_SKIP() << "/sys/kernel/tracing/uprobe_events is not writable (root, tracefs)";
  const std::string at = place_of(reinterpret_cast<const void*>(&probe_fixture_add));
  const std::vector<std::string> args = {
      "",
      "a=%di:s32 s=+0(%si):string",
      "x=%di:x64 y=%si:s32 c=%dx:u8 sx=%dx:x8 w=%cx:u16 sw=%cx:s16 q=%r8:x32",
      "b=+0(%si):b4@2/8 arr=+0(%si):u8[3] warr=+0(%si):x16[2]",
      "st=$stack0 st2=$stack2:u16 sp=$stack cm=$comm imm=\\42 im2=\\\"hi\"",
      "u=+0(%si):ustring ch=+0(%si):char sa=+0(%si):string[2]",
      "%di +0(%si) $stack",
      "s2=+0(+8(%di)):x16 at=@0x1000:u32 fo=@+0x100:u64 n=-8(%sp):s16 uu=+u0(%di):u32",
  };
  const std::vector<std::string> kinds = {"p", "r"};
  int n = 0;
  for (const std::string& kind : kinds) {
    for (const std::string& spec : args) {
      const std::string ev = "f" + std::to_string(n++);
      std::string line = kind + ":usrtrace_fmt/" + ev + " " + at + (spec.empty() ? "" : " " + spec);
      if (kind == "r") line += " rv=$retval:s64";
      SCOPED_TRACE(line);
      ASSERT_TRUE(kernel_write("uprobe_events", line + "\n")) << kernel_read("error_log");
      ASSERT_GE(define(line), 0) << read("error_log");
      const std::string want = without_id(kernel_read("events/usrtrace_fmt/" + ev + "/format"));
      const std::string got = without_id(read("events/usrtrace_fmt/" + ev + "/format"));
      // Listed back as the kernel lists it (the offset in 16 digits, the
      // default names of unnamed args).
      const std::string klist = kernel_read("uprobe_events"), ulist = read("uprobe_events");
      kernel_write("uprobe_events", "-:usrtrace_fmt/" + ev + "\n");
      EXPECT_EQ(got, want);
      auto line_of = [&](const std::string& list) {
        const size_t from = list.find(kind + ":usrtrace_fmt/" + ev + " ");
        return from == std::string::npos ? std::string() : list.substr(from, list.find('\n', from) - from);
      };
      EXPECT_EQ(line_of(ulist), line_of(klist));
    }
  }
}

TEST_F(Probes, ErrorsAreTheKernelsWithTheCaretWhereItPuts) {
  if (!kernel_writable()) GTEST_SKIP() << "/sys/kernel/tracing/uprobe_events is not writable (root, tracefs)";
  const std::string at = place_of(reinterpret_cast<const void*>(&probe_fixture_add));
  const std::vector<std::string> bad = {
      "p:usrtrace_err/x " + at + " a=",
      "p:usrtrace_err/x " + at + " a=%zz",
      "p:usrtrace_err/x " + at + " a=%di:u9",
      "p:usrtrace_err/x " + at + " a=$retval",
      "p:usrtrace_err/x " + at + " a=+0%di",
      "p:usrtrace_err/x " + at + " a=+0(%di",
      "p:usrtrace_err/x " + at + " a=%di a=%si",
      "p:9z/x " + at,
      "p:usrtrace_err/x " + at + " a=%di:string",
      "p:usrtrace_err/x " + at + " a=$stackx",
      "p:usrtrace_err/x " + at + " a=+0(%di):u8[",
      "p:usrtrace_err/x " + at + " a=+0(%di):b9@0/8",
      "p:usrtrace_err/x " + at + " a=\\zz",
      "p:usrtrace_err/x " + at + " a=@zz",
      "p:usrtrace_err/x " + at + " 1a=%di",
  };
  // The last entry of an error_log: its message and caret lines.
  auto last = [](const std::string& log) {
    const size_t e = log.rfind("error: ");
    if (e == std::string::npos) return std::string();
    std::string s = log.substr(e);
    // The caret line's indent is relative to "Command: ".
    return s;
  };
  for (const std::string& line : bad) {
    SCOPED_TRACE(line);
    kernel_write("error_log", "");  // nothing: the kernel clears on O_TRUNC only
    EXPECT_FALSE(kernel_write("uprobe_events", line + "\n"));
    const std::string want = last(kernel_read("error_log"));
    EXPECT_LT(define(line), 0);
    const std::string got = last(read("error_log"));
    EXPECT_EQ(got, want);
  }
}

}  // namespace
