// Events of a shared object register when it is loaded and go when it is
// unloaded.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>

#include "events/registry.h"
#include "instance/instance.h"

namespace usrtrace {
namespace {

TEST(EventDsoTest, RegisterOnLoadUnregisterOnUnload) {
  ASSERT_EQ(events::Registry::get().find("dsotest", "ping"), nullptr);
  void* h = dlopen(USRTRACE_DSO_EVENTS, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto* ev = events::Registry::get().find("dsotest", "ping");
  ASSERT_NE(ev, nullptr);
  const uint16_t id = ev->id;

  instance::Instance* top = instance::Instance::top();
  top->buffer().reset();
  ASSERT_EQ(top->set_event("dsotest", "*", true), 1);
  auto fire = reinterpret_cast<void (*)(int32_t)>(dlsym(h, "dsotest_fire"));
  ASSERT_NE(fire, nullptr);
  fire(77);
  rb::Event e;
  ASSERT_TRUE(top->buffer().consume(&e));
  internal::CommonHeader hdr;
  std::memcpy(&hdr, e.data, sizeof hdr);
  EXPECT_EQ(hdr.type, id);
  char buf[64];
  ev->print(e.data, e.len, buf, sizeof buf);
  EXPECT_STREQ(buf, "n=77");

  ASSERT_EQ(dlclose(h), 0);
  EXPECT_EQ(events::Registry::get().find("dsotest", "ping"), nullptr);
  EXPECT_EQ(events::Registry::get().by_id(id), nullptr);
}

}  // namespace
}  // namespace usrtrace
