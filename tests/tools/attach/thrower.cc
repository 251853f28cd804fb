// A plain C++ program for the attach test (tests/tools/attach_test.sh),
// built with no tracing flag: each line read from stdin makes a call that
// throws through two functions (every third one), caught in main. Under
// function_graph those functions' return addresses are the return hook's:
// the unwinder must not meet it, or the program ends in std::terminate.
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

__attribute__((noinline)) int deep(int i) {
  if (i % 3 == 0) throw std::runtime_error("three");
  return i * 2;
}

__attribute__((noinline)) int middle(int i) { return deep(i) + 1; }

int main() {
  std::string line;
  for (int i = 0; std::getline(std::cin, line); ++i) {
    int r;
    try {
      r = middle(i);
    } catch (const std::exception&) {
      r = -1;
    }
    std::cout << "call " << i << " " << r << std::endl;
  }
  return 0;
}
