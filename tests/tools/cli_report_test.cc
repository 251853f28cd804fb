// `usrtrace report`'s views and exports of recordings made as a user makes
// them: --profile, --graph and --flame-graph (uftrace's views) and
// --format perfetto (decoded by protoc with Perfetto's own schema).
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include "tools/cli_harness.h"

using namespace cli_harness;

namespace {

// A time as report's views print it ("68.038 us") in ns.
double ns_of(const std::string& value, const std::string& unit) {
  const double v = std::stod(value);
  return unit == "ns" ? v : unit == "us" ? v * 1e3 : unit == "ms" ? v * 1e6 : v * 1e9;
}

// The summary views on a known call tree (graph.c: main calls pkg_middle
// 25 times, each calls pkg_leaf 4 times): calls exact, times consistent
// with each other (self within total, a caller's total over its callees',
// the flame graph's self times adding up to main's total).
TEST(CliReport, ProfileGraphAndFlameGraphOfAFunctionGraph) {
  const std::string dir = temp_dir(), file = dir + "/views.dat";
  Result r = run_cli({"record", "-q", "-p", "function_graph", "-o", file, "--", GRAPH_TARGET});
  ASSERT_EQ(r.rc, 0) << r.err;

  r = run_cli({"report", "--profile", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  // "  TOTAL U  SELF U  CALLS  AVG U  MIN U  MAX U  NAME"
  const std::regex row(
      R"(^\s*(\S+) (\S+)\s+(\S+) (\S+)\s+(\d+)\s+(\S+) (\S+)\s+(\S+) (\S+)\s+(\S+) (\S+)\s+(\S+)$)");
  std::map<std::string, std::vector<double>> prof;  // name -> total, self, calls, avg, min, max
  std::vector<std::string> order;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    // graph.c's functions (a sanitizer build adds its module constructors).
    if (!std::regex_match(line, m, row) || !std::regex_match(m[12].str(), std::regex("main|pkg_.*")))
      continue;
    prof[m[12]] = {ns_of(m[1], m[2]), ns_of(m[3], m[4]), std::stod(m[5]),
                   ns_of(m[6], m[7]), ns_of(m[8], m[9]), ns_of(m[10], m[11])};
    order.push_back(m[12]);
  }
  ASSERT_EQ(order, (std::vector<std::string>{"main", "pkg_middle", "pkg_leaf"})) << r.out;  // by total
  EXPECT_EQ(prof["main"][2], 1);
  EXPECT_EQ(prof["pkg_middle"][2], 25);
  EXPECT_EQ(prof["pkg_leaf"][2], 100);
  for (const auto& [fn, v] : prof) {
    EXPECT_LE(v[1], v[0] * 1.001) << fn << ": self within total";
    EXPECT_LE(v[4], v[3] * 1.001) << fn << ": min <= avg";
    EXPECT_LE(v[3], v[5] * 1.001) << fn << ": avg <= max";
  }
  EXPECT_GE(prof["main"][0], prof["pkg_middle"][0]);
  EXPECT_GE(prof["pkg_middle"][0] * 1.001, prof["pkg_middle"][1] + prof["pkg_leaf"][0])
      << "self = total - callees";
  r = run_cli({"report", "--profile", "--sort", "calls", file});
  EXPECT_LT(r.out.find(" pkg_leaf\n"), r.out.find(" pkg_middle\n")) << r.out;
  EXPECT_LT(r.out.find(" pkg_middle\n"), r.out.find(" main\n")) << r.out;
  r = run_cli({"report", "--profile", "--threshold", "1000s", file});
  EXPECT_EQ(count(r.out, "\n"), 2) << "the head only: " << r.out;

  r = run_cli({"report", "--graph", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  // ("+-" before each root when there are several: a sanitizer build's
  // module constructors are roots beside main.)
  const size_t m = r.out.find("(1) main\n"), mid = r.out.find("(25) pkg_middle\n"),
               leaf = r.out.find("(100) pkg_leaf\n");
  EXPECT_TRUE(m != std::string::npos && mid != std::string::npos && leaf != std::string::npos && m < mid &&
              mid < leaf)
      << r.out;

  r = run_cli({"report", "--flame-graph", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::map<std::string, double> folded;
  std::istringstream fin(r.out);
  double sum = 0;
  for (std::string stack; fin >> stack;) {
    double v = 0;
    fin >> v;
    if (stack.rfind("main", 0) != 0) continue;  // a sanitizer's module constructors
    folded[stack] = v;
    sum += v;
  }
  EXPECT_EQ(folded.size(), 3u) << r.out;
  EXPECT_GT(folded["main;pkg_middle;pkg_leaf"], 0) << r.out;
  EXPECT_NEAR(folded["main;pkg_middle;pkg_leaf"], prof["pkg_leaf"][1], prof["pkg_leaf"][1] * 0.001 + 1);
  EXPECT_NEAR(sum, prof["main"][0], prof["main"][0] * 0.001 + 1) << "self times add up to the root's total";

  // Progress on a terminal (script(1) gives the command one), none when
  // stderr is not one; the floor lowered to 0 bytes for this small file.
  if (::access("/usr/bin/script", X_OK) == 0) {
    const std::string cmd = std::string("USRTRACE_REPORT_PROGRESS_BYTES=0 ") + USRTRACE_CLI +
                            " report --profile " + file + " >/dev/null";
    const Result tty = Proc::start({"/usr/bin/script", "-qec", cmd, "/dev/null"}, false).finish();
    EXPECT_EQ(tty.rc, 0) << tty.err;
    EXPECT_NE(tty.out.find("usrtrace report: reading " + file + ":"), std::string::npos) << tty.out;
    EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos) << "the line is erased at the end";
    setenv("USRTRACE_REPORT_PROGRESS_BYTES", "0", 1);
    r = run_cli({"report", "--profile", file});
    unsetenv("USRTRACE_REPORT_PROGRESS_BYTES");
    EXPECT_EQ(r.err, "") << "quiet when stderr is a pipe";
  }

  r = run_cli({"report", "--profile", "--graph", file});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("give one"), std::string::npos) << r.err;
  r = run_cli({"report", "--profile", "--threshold", "soon", file});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--threshold 'soon'"), std::string::npos) << r.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// Without function_graph records, --profile counts the events.
// The interned names of a decoded trace: iid -> name, of one kind
// ("event_names", "debug_annotation_names").
std::map<unsigned, std::string> interned(const std::string& text, const std::string& kind) {
  std::map<unsigned, std::string> names;
  const std::regex entry(kind + R"re( \{\s*iid: (\d+)\s*name: "([^"]*)")re");
  for (std::sregex_iterator it(text.begin(), text.end(), entry), end; it != end; ++it)
    names[static_cast<unsigned>(std::stoul((*it)[1]))] = (*it)[2];
  return names;
}

// report --format perfetto: a function_graph recording as slices per
// thread, each begun and ended, named by the function, as many as the
// program's calls; the process and thread described; decoded by protoc
// with Perfetto's schema; and a third of the JSON's size at most.
TEST(CliReport, PerfettoTraceOfAFunctionGraphDecodesWithPerfettosSchema) {
  const std::string dir = temp_dir(), file = dir + "/p.dat", pf = dir + "/p.pftrace", js = dir + "/p.json";
  const std::string direct = dir + "/direct.pftrace";  // record --perfetto's
  Result r =
      run_cli({"record", "-p", "function_graph", "-o", file, "--perfetto", direct, "--", GRAPH_TARGET});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("recording process (\\d+)"))) << r.err;
  const std::string pid = m[1];
  r = run_cli({"report", "--format", "perfetto", "-o", pf, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "") << "the trace goes to -o";
  // record --perfetto wrote the same conversion of the same file.
  std::ifstream a_in(pf, std::ios::binary), b_in(direct, std::ios::binary);
  std::stringstream a_bytes, b_bytes;
  a_bytes << a_in.rdbuf();
  b_bytes << b_in.rdbuf();
  EXPECT_GT(a_bytes.str().size(), 0u);
  EXPECT_TRUE(a_bytes.str() == b_bytes.str()) << "record --perfetto and report --format perfetto differ";
  std::string why;
  const std::string text = perfetto_text(pf, &why);
  if (text.empty()) GTEST_SKIP() << why;
  const std::map<unsigned, std::string> names = interned(text, "event_names");
  std::map<std::string, int> begins;
  const std::regex begin(R"(type: TYPE_SLICE_BEGIN\s*name_iid: (\d+))");
  for (std::sregex_iterator it(text.begin(), text.end(), begin), end; it != end; ++it)
    begins[names.at(static_cast<unsigned>(std::stoul((*it)[1])))]++;
  EXPECT_EQ(begins["main"], 1);
  EXPECT_EQ(begins["pkg_middle"], 25);
  EXPECT_EQ(begins["pkg_leaf"], 100);
  EXPECT_EQ(count(text, "type: TYPE_SLICE_BEGIN"), count(text, "type: TYPE_SLICE_END"));
  EXPECT_NE(text.find("process {\n      pid: " + pid + "\n      process_name: \"graph_target\""),
            std::string::npos)
      << text.substr(0, 3000);
  EXPECT_NE(text.find("pid: " + pid + "\n      tid: " + pid + "\n      thread_name: \"graph_target\""),
            std::string::npos);
  EXPECT_EQ(count(text, "name: \"pkg_leaf\""), 1) << "interned once";
  r = run_cli({"report", "--format", "json", "-o", js, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  struct stat a, b;
  ASSERT_EQ(::stat(pf.c_str(), &a), 0);
  ASSERT_EQ(::stat(js.c_str(), &b), 0);
  EXPECT_LE(a.st_size * 3, b.st_size) << "perfetto " << a.st_size << " bytes, json " << b.st_size;
  // A binary trace is not written to a terminal, and -o is for exports.
  r = run_cli({"report", "-o", pf, file});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("-o is for --format json or perfetto"), std::string::npos) << r.err;
  r = run_cli({"report", "--format", "protobuf", file});
  EXPECT_NE(r.rc, 0);
  for (const std::string& f : {file, pf, js, direct}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// The golden trace: typed events on the counter clock (time stamps 4, 5,
// ... whatever the machine), as protoc decodes them, equal to
// tests/output/perfetto/counter_events.txt once the pid and the CPU are
// named: instant events named SYSTEM:EVENT with their fields as debug
// annotations, strings interned, the file's own clock mapped to BOOTTIME.
TEST(CliReport, PerfettoTraceOfTypedEventsEqualsTheGolden) {
  const std::string dir = temp_dir(), file = dir + "/c.dat", pf = dir + "/c.pftrace";
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "-C", "counter", "-e", "clitest", "-o", file, "--", CLI_TARGET}, true);
  const std::string script = "tick 3\nrare 2\nexit 0\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result rr = rec.finish();
  ASSERT_EQ(rr.rc, 0) << rr.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(rr.err, m, std::regex("recording process (\\d+)"))) << rr.err;
  const std::string pid = m[1];
  const Result r = run_cli({"report", "--format", "perfetto", "-o", pf, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string why;
  const std::string text = perfetto_text(pf, &why);
  if (text.empty()) GTEST_SKIP() << why;
  // The pid (also the tid and the tick's tid field), and the CPU (the
  // first debug annotation, "cpu", iid 1), are the run's.
  std::string norm;
  std::istringstream in(text);
  bool cpu_next = false;
  for (std::string line; std::getline(in, line);) {
    line = std::regex_replace(line, std::regex("\\b" + pid + "\\b"), "PID");
    if (cpu_next && line.find("uint_value: ") != std::string::npos)
      line = line.substr(0, line.find("uint_value: ")) + "uint_value: CPU";
    cpu_next = line == "      name_iid: 1";
    norm += line + "\n";
  }
  std::ifstream golden(PERFETTO_DIR "/counter_events.txt");
  std::stringstream want;
  want << golden.rdbuf();
  EXPECT_EQ(norm, want.str()) << "to update: write this to tests/output/perfetto/counter_events.txt:\n"
                              << norm;
  for (const std::string& f : {file, pf}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliReport, ProfileCountsEventsOfAnEventTrace) {
  const std::string dir = temp_dir(), file = dir + "/events.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-q", "-e", "clitest", "-o", file, "--", CLI_TARGET}, true);
  const std::string script = "tick 7\nrare 2\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result done = rec.finish();
  ASSERT_EQ(done.rc, 0) << done.err;
  const Result r = run_cli({"report", "--profile", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("           7  clitest:tick\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("           2  clitest:rare\n"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("clitest:tick"), r.out.find("clitest:rare")) << r.out;
  const Result g = run_cli({"report", "--graph", file});
  EXPECT_NE(g.out.find("no function_graph records"), std::string::npos) << g.out;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// ---- Files as an attacker makes them ----

// A trace.dat (version 6) made byte by byte: the event formats and the
// records a test chooses, on CPU 0, in 4096-byte pages. A record is its
// payload (common fields first), a multiple of 4 bytes, at most 112.
struct HandMadeTrace {
  std::vector<std::string> ftrace;                          // ftrace's formats
  std::vector<std::pair<std::string, std::string>> events;  // system, format
  std::string kallsyms = "0000000000001000 T main\n";
  std::string printk;
  std::vector<std::vector<uint8_t>> records;

  template <class T>
  static void put(std::string* b, T v) {
    b->append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static void sized(std::string* b, const std::string& text) {
    put<uint64_t>(b, text.size());
    *b += text;
  }

  void write(const std::string& path) const {
    std::string b("\x17\x08\x44tracing6", 11);
    b += '\0';
    b += '\0';                // little-endian
    b += '\x08';              // long size
    put<uint32_t>(&b, 4096);  // page size
    b.append("header_page", 12);
    sized(&b,
          "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
          "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
          "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
          "\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n");
    b.append("header_event", 13);
    sized(&b,
          "# compressed entry header\n\ttype_len    :    5 bits\n\ttime_delta  :   27 bits\n"
          "\tarray       :   32 bits\n");
    put<uint32_t>(&b, static_cast<uint32_t>(ftrace.size()));
    for (const std::string& f : ftrace) sized(&b, f);
    put<uint32_t>(&b, static_cast<uint32_t>(events.size()));  // a system per event
    for (const auto& [sys, f] : events) {
      b.append(sys.c_str(), sys.size() + 1);
      put<uint32_t>(&b, 1);
      sized(&b, f);
    }
    put<uint32_t>(&b, static_cast<uint32_t>(kallsyms.size()));
    b += kallsyms;
    put<uint32_t>(&b, static_cast<uint32_t>(printk.size()));
    b += printk;
    sized(&b, "");         // saved cmdlines
    put<uint32_t>(&b, 1);  // CPUs
    b.append("flyrecord", 10);
    std::string pages, page;
    auto flush = [&] {
      std::string head;
      put<uint64_t>(&head, 1000);         // time stamp
      put<uint64_t>(&head, page.size());  // commit
      page = head + page;
      page.resize(4096, '\0');
      pages += page;
      page.clear();
    };
    for (const std::vector<uint8_t>& r : records) {
      if (page.size() + 4 + r.size() > 4080) flush();
      put<uint32_t>(&page, (1u << 5) | static_cast<uint32_t>(r.size() / 4));  // delta 1, type_len
      page.append(reinterpret_cast<const char*>(r.data()), r.size());
    }
    if (!page.empty()) flush();
    const uint64_t at = (b.size() + 16 + 4095) / 4096 * 4096;
    put<uint64_t>(&b, at);
    put<uint64_t>(&b, pages.size());
    b.resize(at, '\0');
    b += pages;
    std::ofstream(path, std::ios::binary) << b;
  }
};

constexpr char kCommon[] =
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";

// ftrace's function_graph formats, as usrtrace records them, with the
// func field at `func_offset`.
std::vector<std::string> graph_formats(int func_offset = 8) {
  const std::string func =
      "\tfield:unsigned long func;\toffset:" + std::to_string(func_offset) + ";\tsize:8;\tsigned:0;\n";
  return {"name: funcgraph_entry\nID: 11\nformat:\n" + std::string(kCommon) + func +
              "\tfield:unsigned int depth;\toffset:16;\tsize:4;\tsigned:0;\n\n"
              "print fmt: \"--> %ps (%u)\", (void *)REC->func, REC->depth\n",
          "name: funcgraph_exit\nID: 10\nformat:\n" + std::string(kCommon) + func +
              "\tfield:unsigned int depth;\toffset:16;\tsize:4;\tsigned:0;\n"
              "\tfield:unsigned int overrun;\toffset:20;\tsize:4;\tsigned:0;\n"
              "\tfield:unsigned long long calltime;\toffset:24;\tsize:8;\tsigned:0;\n"
              "\tfield:unsigned long long rettime;\toffset:32;\tsize:8;\tsigned:0;\n\n"
              "print fmt: \"<-- %ps (%u) (start: %llx  end: %llx) over: %u\", (void *)REC->func, "
              "REC->depth, REC->calltime, REC->rettime, REC->depth\n"};
}

template <class T>
void put_at(std::vector<uint8_t>* r, size_t at, T v) {
  if (r->size() < at + sizeof v) r->resize(at + sizeof v);
  std::memcpy(r->data() + at, &v, sizeof v);
}

// A funcgraph_entry (24 bytes) or funcgraph_exit (40 bytes) record.
std::vector<uint8_t> graph_record(bool entry, int32_t tid, uint64_t func, uint32_t depth, uint64_t call = 0,
                                  uint64_t ret = 0) {
  std::vector<uint8_t> r(entry ? 24 : 40);
  put_at<uint16_t>(&r, 0, entry ? 11 : 10);
  put_at<int32_t>(&r, 4, tid);
  put_at<uint64_t>(&r, 8, func);
  put_at<uint32_t>(&r, 16, depth);
  if (!entry) {
    put_at<uint64_t>(&r, 24, call);
    put_at<uint64_t>(&r, 32, ret);
  }
  return r;
}

// `usrtrace ARGS` with its output in *out, and the most memory it held
// (its peak resident set, from wait4).
Result run_measured(const std::vector<std::string>& args, const std::string& out, long* max_rss_kb) {
  std::vector<std::string> argv = {USRTRACE_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string err = out + ".err";
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
              e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  Result r;
  if (pid < 0 || wait4(pid, &status, 0, &ru) != pid) return r;
  r.rc = status_of(status);
  *max_rss_kb = ru.ru_maxrss;
  std::ifstream eo(err);
  std::stringstream es;
  es << eo.rdbuf();
  r.err = es.str();
  ::unlink(err.c_str());
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A __data_loc field at offset -2 (4294967294, which libtraceevent makes
// an int): the exports' bound check wrapped (`off + 4 > len` in 32 bits)
// and read 4 GiB past the record (a segfault, from an 8 KiB file that a
// traced process can write, formats and all). The field is null in JSON and absent in Perfetto; the rest of
// the record is there.
TEST(CliReportMalformed, ADataLocFieldBeforeTheRecordIsNull) {
  const std::string dir = temp_dir(), file = dir + "/loc.dat", js = dir + "/loc.json",
                    pf = dir + "/loc.pftrace";
  HandMadeTrace t;
  t.events.push_back(
      {"hostile", "name: str\nID: 100\nformat:\n" + std::string(kCommon) +
                      "\tfield:__data_loc char[] msg;\toffset:4294967294;\tsize:4;\tsigned:0;\n"
                      "\tfield:unsigned int n;\toffset:8;\tsize:4;\tsigned:0;\n\n"
                      "print fmt: \"n=%u msg=%s\", REC->n, __get_str(msg)\n"});
  for (uint32_t i = 0; i < 10; ++i) {
    std::vector<uint8_t> r(12);
    put_at<uint16_t>(&r, 0, 100);
    put_at<int32_t>(&r, 4, 4242);
    put_at<uint32_t>(&r, 8, i);
    t.records.push_back(r);
  }
  t.write(file);
  Result r = run_cli({"report", "--format", "json", "-o", js, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string json = slurp(js);
  EXPECT_EQ(count(json, "\"msg\":null"), 10) << json;
  EXPECT_NE(json.find("\"n\":9"), std::string::npos) << json;
  r = run_cli({"report", "--format", "perfetto", "-o", pf, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_cli({"report", file});  // the text, through libtraceevent
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "n=9"), 1) << r.out;
  for (const std::string& f : {file, js, pf}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// funcgraph's func field past the record: far past (the views and the
// exports read it unchecked, a segfault) or a little (they read the next
// record's bytes as the function). Every field is read only where the
// record holds it: such records are skipped by the views, saying so, and
// are instants in the exports.
TEST(CliReportMalformed, GraphFieldsPastTheRecordAreNotRead) {
  const std::string dir = temp_dir(), file = dir + "/far.dat", out = dir + "/far.out";
  for (const int offset : {99999999, 200}) {
    SCOPED_TRACE(offset);
    HandMadeTrace t;
    t.ftrace = graph_formats(offset);
    for (int i = 0; i < 50; ++i) {
      t.records.push_back(graph_record(true, 4242, 0x1000, 0));
      t.records.push_back(graph_record(false, 4242, 0x1000, 0, 100, 200));
    }
    t.write(file);
    for (const char* view : {"--profile", "--graph", "--flame-graph"}) {
      const Result r = run_cli({"report", view, file});
      EXPECT_EQ(r.rc, 0) << view << ": " << r.err;
      EXPECT_NE(r.err.find("100 function_graph records do not hold their fields; skipped"), std::string::npos)
          << view << ": " << r.err;
      EXPECT_EQ(r.out.find("main"), std::string::npos) << view << ": " << r.out;
    }
    Result r = run_cli({"report", "--format", "json", "-o", out, file});
    EXPECT_EQ(r.rc, 0) << r.err;
    const std::string json = slurp(out);
    EXPECT_EQ(count(json, "\"ph\":\"i\""), 100) << "instants, not slices: " << json.substr(0, 2000);
    EXPECT_EQ(count(json, "\"func\":null"), 100) << json.substr(0, 2000);
    r = run_cli({"report", "--format", "perfetto", "-o", out, file});
    EXPECT_EQ(r.rc, 0) << r.err;
    std::string why;
    const std::string text = perfetto_text(out, &why);
    if (!text.empty()) {
      EXPECT_EQ(count(text, "type: TYPE_SLICE_BEGIN"), 0) << text.substr(0, 3000);
      EXPECT_EQ(count(text, "type: TYPE_INSTANT"), 100) << text.substr(0, 3000);
    }
  }
  for (const std::string& f : {file, out}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// The views kept a stack per thread as deep as a record's depth says
// (65535 is the recorder's own limit): 768 KiB a thread id, so 2000
// threads of a call and a return each (a 144 KB file) held 1.5 GB. A
// thread's stacks grow with the calls it has, not the depth it claims.
TEST(CliReportMalformed, DeepCallsOfManyThreadsCostTheirRecords) {
  const std::string dir = temp_dir(), file = dir + "/deep.dat", out = dir + "/deep.out";
  HandMadeTrace t;
  t.ftrace = graph_formats();
  for (int tid = 1; tid <= 2000; ++tid) {
    t.records.push_back(graph_record(true, tid, 0x1000, 65535));
    t.records.push_back(graph_record(false, tid, 0x1000, 65535, 100, 300));
  }
  t.write(file);
  long rss_kb = 0;
  const Result r = run_measured({"report", "--profile", file}, out, &rss_kb);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_LT(rss_kb, 256 * 1024) << "KiB at most, for a file of " << slurp(file).size() << " bytes";
  // Each thread's call returned: 2000 calls of 200 ns.
  EXPECT_TRUE(std::regex_search(
      slurp(out), std::regex(R"(400.000 us\s+400.000 us\s+2000\s+200 ns\s+200 ns\s+200 ns\s+main\n)")))
      << slurp(out);
  for (const std::string& f : {file, out}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// libtraceevent reads a record's common fields where the first format
// says, unchecked: common_pid at offset 99999999 made every mode of report
// read 95 MiB past each record (a segfault; the thread of every record is
// tep_data_pid()'s). Fields outside any record (past the file's largest
// page, or before the record) are made empty once, with a warning, and
// every record is handed to libtraceevent as a copy followed by zeros as
// far as a format can reach.
TEST(CliReportMalformed, FieldsOutsideAnyRecordAreNotRead) {
  const std::string dir = temp_dir(), file = dir + "/print.dat", js = dir + "/print.json";
  std::string common = kCommon;
  common.replace(common.find("common_pid;\toffset:4;"), 21, "common_pid;\toffset:99999999;");
  HandMadeTrace t;
  t.events.push_back(
      {"hostile", "name: far\nID: 100\nformat:\n" + common +
                      "\tfield:unsigned long long far;\toffset:99999999;\tsize:8;\tsigned:0;\n"
                      "\tfield:__data_loc char[] msg;\toffset:8;\tsize:4;\tsigned:0;\n"
                      "\tfield:unsigned int n;\toffset:12;\tsize:4;\tsigned:0;\n\n"
                      "print fmt: \"n=%u far=%llu msg=%s\", REC->n, REC->far, __get_str(msg)\n"});
  for (uint32_t i = 0; i < 200; ++i) {
    std::vector<uint8_t> r(16);
    put_at<uint16_t>(&r, 0, 100);
    put_at<int32_t>(&r, 4, 4242);
    put_at<uint32_t>(&r, 8, (0xfff0u << 16) | 0xfff0u);  // 65520 bytes at 65520
    put_at<uint32_t>(&r, 12, i);
    t.records.push_back(r);
  }
  t.write(file);
  Result r = run_cli({"report", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "far=0 msg=\n"), 200) << r.out.substr(0, 2000);
  EXPECT_NE(r.err.find("2 field(s) of the event formats lie outside any record (hostile:far common_pid at "
                       "offset 99999999, size 4); read as absent"),
            std::string::npos)
      << r.err;
  r = run_cli({"report", "--profile", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("         200  hostile:far\n"), std::string::npos) << r.out;
  r = run_cli({"report", "--format", "json", "-o", js, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(slurp(js), "\"far\":null"), 200);
  for (const std::string& f : {file, js}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// Text that libtraceevent 1.7 misreads, found by report_fuzzer: an event
// format with a NUL byte in it (its tokenizer compared a NULL token: a
// segfault), and a printk_formats line with nothing after its ':' (read
// past libtraceevent's copy of the text; only an ASan build sees it). The
// format is left out with a warning, the line is not handed over, and the
// other events still print.
TEST(CliReportMalformed, TextLibtraceeventMisreadsIsLeftOut) {
  const std::string dir = temp_dir(), file = dir + "/nul.dat";
  HandMadeTrace t;
  std::string nul = "name: nul\nID: 101\nformat:\n" + std::string(kCommon) +
                    "\tfield:char label[offset:8;\tsize:8;\tsigned:0;\n\nprint fmt: \"x\"\n";
  nul.replace(nul.find("label[") + 6, 0, std::string(4, '\0'));
  t.events.push_back({"hostile", nul});
  t.events.push_back({"hostile", "name: ok\nID: 102\nformat:\n" + std::string(kCommon) +
                                     "\tfield:unsigned int n;\toffset:8;\tsize:4;\tsigned:0;\n\n"
                                     "print fmt: \"n=%u\", REC->n\n"});
  t.printk = "ffffffff81000000 : \"fine\"\nffffffff81000010 :";
  for (const int id : {101, 102}) {
    std::vector<uint8_t> r(16);
    put_at<uint16_t>(&r, 0, static_cast<uint16_t>(id));
    put_at<int32_t>(&r, 4, 4242);
    put_at<uint32_t>(&r, 8, 7);
    t.records.push_back(r);
  }
  t.write(file);
  const Result r = run_cli({"report", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("an event format of system hostile holds a NUL byte; left out"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("AddressSanitizer"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("ok:                   n=7\n"), std::string::npos) << r.out;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// A print format that divides by a field (0: SIGFPE inside libtraceevent,
// found by report_fuzzer) or takes __print_hex's length from a u32 field
// (4 GiB read past the record): printed raw, as libtraceevent prints a
// format it cannot parse ("[FAILED TO PARSE]" and the fields); a u8
// length (the kernel's kvm_emulate_insn) still prints.
TEST(CliReportMalformed, PrintFormatsComputeNothingUnbounded) {
  const std::string dir = temp_dir(), file = dir + "/div.dat", js = dir + "/div.json";
  HandMadeTrace t;
  const std::string fields = std::string(kCommon) +
                             "\tfield:unsigned int n;\toffset:8;\tsize:4;\tsigned:0;\n"
                             "\tfield:unsigned int d;\toffset:12;\tsize:4;\tsigned:0;\n"
                             "\tfield:unsigned char b;\toffset:16;\tsize:1;\tsigned:0;\n"
                             "\tfield:unsigned char buf[4];\toffset:17;\tsize:4;\tsigned:0;\n\n";
  t.events.push_back({"hostile", "name: div\nID: 100\nformat:\n" + fields +
                                     "print fmt: \"n=%u q=%u\", REC->n, REC->n / REC->d\n"});
  t.events.push_back({"hostile", "name: hex\nID: 101\nformat:\n" + fields +
                                     "print fmt: \"n=%u %s\", REC->n, __print_hex(REC->buf, REC->n)\n"});
  t.events.push_back({"hostile", "name: ok\nID: 102\nformat:\n" + fields +
                                     "print fmt: \"n=%u %s\", REC->n, __print_hex(REC->buf, REC->b)\n"});
  for (const int id : {100, 101, 102}) {
    std::vector<uint8_t> r(24);
    put_at<uint16_t>(&r, 0, static_cast<uint16_t>(id));
    put_at<int32_t>(&r, 4, 4242);
    put_at<uint32_t>(&r, 8, id == 102 ? 7 : 0xffffffffu);
    put_at<uint32_t>(&r, 12, 0);
    put_at<uint8_t>(&r, 16, 2);
    put_at<uint32_t>(&r, 17, 0x04030201);
    t.records.push_back(r);
  }
  t.write(file);
  Result r = run_cli({"report", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "[FAILED TO PARSE]"), 2) << r.out;
  EXPECT_NE(r.out.find("ok:                   n=7 01 02\n"), std::string::npos) << r.out;
  r = run_cli({"report", "--format", "json", "-o", js, file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(slurp(js), "\"d\":0"), 3);
  for (const std::string& f : {file, js}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// libtraceevent 1.7 folds an operation on two constants while it parses
// the format, dividing unchecked: `1 / 0`, `R%s` (a name folds to 0, what
// report_fuzzer found) and `REC->n / 2 * 0` (taken as n / (2 * 0)) raised
// SIGFPE inside tep_parse_event. Their print fmt is left out with a
// warning, their fields kept; a kernel-shaped divisor (`/ 1000L`,
// `% 64`) still prints.
TEST(CliReportMalformed, AFormatThatFoldsADivisionByZeroIsNotParsed) {
  const std::string dir = temp_dir(), file = dir + "/fold.dat";
  HandMadeTrace t;
  const std::string fields =
      std::string(kCommon) + "\tfield:unsigned int n;\toffset:8;\tsize:4;\tsigned:0;\n\n";
  const char* const bad[] = {"1 / 0", "R%s->n", "REC->n / 2 * 0", "REC->n % (1 - 1)", "REC->n / -1"};
  int id = 100;
  for (const char* e : bad) {
    const std::string n = std::to_string(id++);
    t.events.push_back({"hostile", "name: fold" + n + "\nID: " + n + "\nformat:\n" + fields +
                                       "print fmt: \"q=%u\", " + e + "\n"});
  }
  t.events.push_back(
      {"hostile", "name: ok\nID: 200\nformat:\n" + fields +
                      "print fmt: \"q=%u r=%u s=%s\", REC->n / 1000L, REC->n % 64, \"1/0%\"\n"});
  for (const int i : {100, 101, 102, 103, 104, 200}) {
    std::vector<uint8_t> r(16);
    put_at<uint16_t>(&r, 0, static_cast<uint16_t>(i));
    put_at<int32_t>(&r, 4, 4242);
    put_at<uint32_t>(&r, 8, 64123);
    t.records.push_back(r);
  }
  t.write(file);
  const Result r = run_cli({"report", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.err, "divides by what may be zero; its print fmt is left out, its fields are kept"), 5)
      << r.err;
  EXPECT_EQ(count(r.out, "[FAILED TO PARSE] n=64123"), 5) << r.out;
  EXPECT_NE(r.out.find("ok:                   q=64 r=59 s=1/0%\n"), std::string::npos) << r.out;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
