// Every instance-scoped test runs twice: on the top instance and on a new
// one (kselftest's "# flags: instance", libtracefs's utest). A suite derives
// its fixture from InstanceTest and instantiates it with
//
//   INSTANTIATE_TEST_SUITE_P(TopAndNew, MySuiteTest, ::testing::Values("", "my_new"),
//                            usrtrace::testing::top_or_new);
//
// and addresses its files with path("events/x/y/trigger"), which is
// "events/x/y/trigger" on the top and "instances/my_new/events/x/y/trigger"
// on the new instance.
//
// A new instance is made in SetUp and removed in TearDown. The top cannot
// be removed, so it is reset instead, through its control files, the way
// kselftest's initialize_system() does it: no tracer, no trigger, filter or
// enabled event, empty function lists, no snapshot, every setting as a new
// instance has it, empty buffers. TearDown then checks that the top reads
// as a new instance does, so a test cannot leave the top changed for the
// next one (a gtest binary runs them all in one process).
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <vector>

#include "instance/instance.h"
#include "tracefs/tracefs.h"

namespace usrtrace::testing {

// The test name suffix of a {top, new} parameter.
inline std::string top_or_new(const ::testing::TestParamInfo<const char*>& p) {
  return *p.param ? "New" : "Top";
}

namespace reset_detail {

inline std::string read(const std::string& path) {
  std::string out;
  if (tracefs::read_file(path, &out) < 0) return "<unreadable>";
  return out;
}

inline bool exists(const std::string& path) {
  tracefs::Stat st;
  return tracefs::stat(path, &st) == 0;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    if (nl > at && text[at] != '#') out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

// "x:count=3" / "x:unlimited" -> "x": set_ftrace_filter's listing of a
// function command, as its '!' removal names it.
inline std::string without_count(std::string s) {
  const size_t colon = s.rfind(':');
  if (colon != std::string::npos) {
    const std::string_view last = std::string_view(s).substr(colon + 1);
    if (last == "unlimited" || last.substr(0, 6) == "count=") s.resize(colon);
  }
  return s;
}

// The '!' command that removes a listed event trigger: the line as listed,
// up to its filter, count included (what the kernel selftests'
// reset_trigger_file writes; the count of a removal is not parsed). A hist
// trigger is found by its whole spec and its filter (the kernel's
// hist_trigger_match), the others by their command and target.
inline std::string trigger_removal(const std::string& line) {
  if (line.rfind("hist", 0) == 0) {
    std::string cmd = line.substr(0, line.rfind(" ["));
    return "!" + cmd;
  }
  // Appended, not "!" + substr(): g++ 12 -O3 warns of a false overlap in
  // operator+(const char*, string&&) (-Wrestrict; a known false positive).
  return std::string("!").append(line, 0, line.find(' '));
}

// The directories of events/ (systems), or of a system (its events).
inline std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> names, out;
  if (tracefs::list(dir, &names) < 0) return out;
  for (const std::string& n : names) {
    tracefs::Stat st;
    if (tracefs::stat(dir + "/" + n, &st) == 0 && st.is_dir) out.push_back(n);
  }
  return out;
}

// Every per-event and per-system control file of the tree under `dir`
// ("" or "instances/NAME/"), relative to it.
inline std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out{"events/enable"};
  for (const std::string& sys : subdirs(dir + "events")) {
    const std::string s = "events/" + sys + "/";
    for (const char* f : {"enable", "filter"})
      if (exists(dir + s + f)) out.push_back(s + f);
    for (const std::string& ev : subdirs(dir + "events/" + sys))
      for (const char* f : {"trigger", "filter", "enable"})
        if (exists(dir + s + ev + "/" + f)) out.push_back(s + ev + "/" + f);
  }
  return out;
}

// Settings copied from a new instance, in this order (a latency tracer
// holds the clock, so current_tracer went first).
inline const std::vector<std::string>& settings() {
  static const std::vector<std::string> kFiles = {
      "trace_clock",     "buffer_size_kb", "buffer_percent",      "tracing_cpumask",    "snapshot_ring_size",
      "max_graph_depth", "tracing_thresh", "tracing_max_latency", "timerlat_period_us",
  };
  return kFiles;
}

// What to write back to get a setting read as `shown`: "[local] global" ->
// "local", "1408\n" -> "1408".
inline std::string value_of(const std::string& shown) {
  const size_t open = shown.find('[');
  if (open != std::string::npos) return shown.substr(open + 1, shown.find(']', open) - open - 1);
  return shown.substr(0, shown.find_first_of(" \n"));
}

// The files the check compares between the top and a new instance.
inline std::vector<std::string> compared_files() {
  std::vector<std::string> out = {
      "current_tracer",
      "tracing_on",
      "set_event",
      "set_event_pid",
      "set_event_notrace_pid",
      "set_ftrace_filter",
      "set_ftrace_notrace",
      "set_graph_function",
      "set_graph_notrace",
      "set_ftrace_pid",
      "set_ftrace_notrace_pid",
      "snapshot_enabled",
      "trace_options",
  };
  out.insert(out.end(), settings().begin(), settings().end());
  return out;
}

}  // namespace reset_detail

// Puts the top instance back as a new instance has it (see the top of the
// file). Returns what still differs from a new instance, one line each;
// empty when the top is clean.
inline std::vector<std::string> reset_top() {
  using namespace reset_detail;
  std::vector<std::string> problems;
  auto write = [&](const std::string& path, std::string_view text, bool append = false) {
    const long rc = tracefs::write_file(path, text, append);
    if (rc < 0) problems.push_back("write '" + std::string(text) + "' > " + path + ": " + std::to_string(rc));
  };
  write("current_tracer", "nop");
  // Triggers first (they may hold events in soft mode), then filters and
  // the events themselves.
  for (const std::string& f : event_files(""))
    if (f.size() > 8 && f.compare(f.size() - 8, 8, "/trigger") == 0)
      for (const std::string& line : lines_of(read(f))) write(f, trigger_removal(line), true);
  for (const std::string& sys : subdirs("events"))
    if (exists("events/" + sys + "/filter")) write("events/" + sys + "/filter", "0");
  for (const std::string& f : event_files(""))
    if (f.size() > 7 && f.compare(f.size() - 7, 7, "/filter") == 0 && read(f) != "none\n") write(f, "0");
  write("events/enable", "0");
  write("set_event", "");
  write("set_event_pid", "");
  write("set_event_notrace_pid", "");
  // Function lists; a command stays through '>' and goes with '!'.
  write("set_ftrace_filter", "");
  for (const std::string& line : lines_of(read("set_ftrace_filter")))
    if (line.find(':') != std::string::npos)
      write("set_ftrace_filter", std::string("!").append(without_count(line)), true);  // as above
  for (const char* f : {"set_ftrace_notrace", "set_graph_function", "set_graph_notrace", "set_ftrace_pid",
                        "set_ftrace_notrace_pid"})
    write(f, "");
  if (read("snapshot_enabled") != "0\n") write("snapshot", "0");

  // The settings and options of a new instance.
  const std::string ref = "instances/usrtrace_reset_ref";
  tracefs::rmdir(ref);
  if (int rc = tracefs::mkdir(ref); rc < 0) {
    problems.push_back("mkdir " + ref + ": " + std::to_string(rc));
    return problems;
  }
  const std::string rdir = ref + "/";
  for (const std::string& f : settings()) {
    const std::string want = read(rdir + f);
    if (read(f) != want) write(f, value_of(want));
  }
  std::vector<std::string> options;
  tracefs::list(rdir + "options", &options);
  for (const std::string& o : options) {
    const std::string want = read(rdir + "options/" + o);
    if (read("options/" + o) != want) write("options/" + o, value_of(want));
  }
  write("trace", "");  // the buffers, and the max trace
  write("error_log", "");
  write("tracing_on", "1");

  // The check: the top reads as the new instance does.
  std::vector<std::string> files = compared_files();
  for (const std::string& o : options) files.push_back("options/" + o);
  const std::vector<std::string> ev = event_files(rdir);
  files.insert(files.end(), ev.begin(), ev.end());
  for (const std::string& f : files) {
    const std::string top = read(f), fresh = read(rdir + f);
    if (top != fresh) problems.push_back(f + ": '" + top + "', a new instance: '" + fresh + "'");
  }
  rb::RingBuffer::Iterator it(instance::Instance::top()->buffer());
  rb::Event e;
  if (it.next(&e)) problems.push_back("the top buffer is not empty");
  if (int rc = tracefs::rmdir(ref); rc < 0) problems.push_back("rmdir " + ref + ": " + std::to_string(rc));
  return problems;
}

// The {top, new} fixture. GetParam() is "" for the top instance, else the
// name of the new instance.
class InstanceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    name_ = GetParam();
    if (top()) {
      dir_.clear();
      for (const std::string& p : reset_top()) ADD_FAILURE() << "the top was not clean: " << p;
    } else {
      dir_ = "instances/" + name_ + "/";
      tracefs::rmdir("instances/" + name_);  // a leftover of a test that crashed
      ASSERT_EQ(tracefs::mkdir("instances/" + name_), 0) << name_;
    }
    inst_ = instance::Instance::find(name_);
    ASSERT_NE(inst_, nullptr) << name_;
  }
  void TearDown() override {
    if (top()) {
      for (const std::string& p : reset_top()) ADD_FAILURE() << "the test left the top changed: " << p;
    } else {
      EXPECT_EQ(tracefs::rmdir("instances/" + name_), 0) << name_;
    }
  }

  bool top() const { return name_.empty(); }
  const std::string& name() const { return name_; }
  // "" on the top, "instances/NAME/" on the new instance.
  const std::string& dir() const { return dir_; }
  std::string path(std::string_view file) const { return dir_ + std::string(file); }
  instance::Instance* inst() const { return inst_; }

 private:
  std::string name_, dir_;
  instance::Instance* inst_ = nullptr;
};

// Another instance than the one under test, for tests of what stays in
// one instance: the top for a new instance, a new one (made here, removed
// at the end) for the top.
class OtherInstance {
 public:
  // `top`: the instance under test is the top.
  explicit OtherInstance(bool top, std::string name = "other") {
    if (!top) return;
    name_ = std::move(name);
    dir_ = "instances/" + name_ + "/";
    tracefs::rmdir("instances/" + name_);
    EXPECT_EQ(tracefs::mkdir("instances/" + name_), 0) << name_;
  }
  ~OtherInstance() {
    if (!name_.empty()) {
      EXPECT_EQ(tracefs::rmdir("instances/" + name_), 0) << name_;
    }
  }
  OtherInstance(const OtherInstance&) = delete;
  OtherInstance& operator=(const OtherInstance&) = delete;

  std::string path(std::string_view file) const { return dir_ + std::string(file); }
  instance::Instance* inst() const { return instance::Instance::find(name_); }

 private:
  std::string name_, dir_;
};

}  // namespace usrtrace::testing
