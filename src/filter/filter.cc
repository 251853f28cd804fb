// TEMPORARY STUB (not committed): replaced by the filter branch.
#include "filter/filter.h"
namespace usrtrace::filter {
struct Program::Impl { std::string text; };
Program::Program() : impl_(std::make_unique<Impl>()) {}
Program::~Program() = default;
const char* message(ErrorCode) { return "stub"; }
std::unique_ptr<Program> Program::compile(const internal::EventDesc&, std::string_view e, Error* err) {
  if (e == "true") { auto p = std::unique_ptr<Program>(new Program()); p->impl_->text = std::string(e); return p; }
  err->code = ErrorCode::kFieldNotFound; err->pos = 0; return nullptr; }
bool Program::match(const void*, uint32_t, const Context&) const { return true; }
const std::string& Program::text() const { return impl_->text; }
}
