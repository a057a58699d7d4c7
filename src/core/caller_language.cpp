#include "kiln/caller_language.h"

#include <atomic>

namespace kiln {
namespace {
std::atomic<CallerLanguage> language{CallerLanguage::Cpp};
}  // namespace

void set_caller_language(CallerLanguage l) { language.store(l, std::memory_order_relaxed); }
CallerLanguage caller_language() { return language.load(std::memory_order_relaxed); }

}  // namespace kiln
