// The tools-only layer (usrtrace_toolkit/toolkit.h): thin doors onto the
// internals the command uses.
#include "usrtrace_toolkit/toolkit.h"

#include "base/files.h"
#include "output/trace_output.h"
#include "record/journal.h"
#include "record/kernel_source.h"

namespace usrtrace::toolkit {

int open_regular_for_read(const std::string& path, off_t* size, std::string* why) {
  return base::open_regular_for_read(path, size, why);
}

int write_output(const std::string& path, const std::function<int(int fd, std::string* err)>& fill,
                 std::string* err) {
  return base::write_output(path, fill, err);
}

uint64_t process_start_time(int pid) { return base::process_start_time(std::to_string(pid)); }

void put_flag_columns(std::string* out, uint8_t flags, uint8_t preempt_count) {
  output::put_flag_columns(out, flags, preempt_count);
}

bool is_journal(const void* p, size_t n) { return tracedat::is_journal(p, n); }

int check_kernel_events(const std::vector<std::string>& specs, std::string* err) {
  std::string tracefs;
  return tracedat::KernelSource::check(specs, &tracefs, err);
}

std::vector<std::string> abandoned_journals(const std::string& output) {
  return tracedat::abandoned_journals(output);
}

JournalFile::JournalFile() = default;
JournalFile::~JournalFile() = default;

std::unique_ptr<JournalFile> JournalFile::read(int fd, std::string* err) {
  std::unique_ptr<JournalFile> f(new JournalFile);
  f->j_ = std::make_unique<tracedat::Journal>();
  if (tracedat::read_journal(fd, f->j_.get(), err) < 0) return nullptr;
  return f;
}

const std::string& JournalFile::output() const { return j_->output; }
int JournalFile::file_version() const { return j_->file_version; }
bool JournalFile::compress() const { return j_->compress; }
const std::string& JournalFile::damage() const { return j_->damage; }
void JournalFile::set_file_version(int v) { j_->file_version = v; }
void JournalFile::set_compress(bool c) { j_->compress = c; }

// Counted as read (compressed chunks' extents are not pages).
uint64_t JournalFile::pages() const { return j_->pages; }

std::string JournalFile::beside_journal(const std::string& journal) {
  return tracedat::output_beside_journal(journal);
}

bool JournalFile::has_page_files() const { return !j_->page_fds.empty(); }

int JournalFile::write(const std::string& output, std::string* err) const {
  return tracedat::write_from_journal(*j_, output, {}, err);
}

}  // namespace usrtrace::toolkit
