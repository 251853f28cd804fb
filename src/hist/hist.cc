// TEMPORARY STUB (not committed): replaced by the hist branch.
#include "hist/hist.h"
namespace usrtrace::hist {
struct Histogram::Impl {};
Histogram::Histogram() {}
Histogram::~Histogram() = default;
std::unique_ptr<Histogram> Histogram::create(const internal::EventDesc&, std::string_view, Error* e) { e->message = "stub"; return nullptr; }
void Histogram::record(const void*, uint32_t, const RecordContext&) {}
bool Histogram::wants_pause() const { return false; }
bool Histogram::wants_cont() const { return false; }
bool Histogram::wants_clear() const { return false; }
bool Histogram::same_spec(const Histogram&) const { return false; }
void Histogram::pause() {} void Histogram::cont() {} void Histogram::clear() {}
bool Histogram::paused() const { return false; }
std::string Histogram::trigger_text(std::string_view) const { return {}; }
std::string Histogram::print(std::string_view) const { return {}; }
}
