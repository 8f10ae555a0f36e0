#include "common/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace colibri {
namespace {

// Pages of [at, at + pages * page) resident in memory (mincore).
std::vector<bool> Resident(uint8_t* at, size_t pages, size_t page) {
  std::vector<unsigned char> in(pages);
  EXPECT_EQ(::mincore(at, pages * page, in.data()), 0);
  std::vector<bool> out(pages);
  for (size_t i = 0; i < pages; ++i) out[i] = (in[i] & 1) != 0;
  return out;
}

TEST(PopulatePagesTest, CommitsThePagesARangeTouchesAndKeepsWhatTheyHold) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  constexpr size_t kPages = 7;
  void* p =
      ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint8_t* const at = static_cast<uint8_t*>(p);
  std::memset(at + 2 * page + 100, 0x5a, 300);  // page 2 written, the rest untouched
  if (!PopulatePages(at + 6 * page, page)) {    // whole pages: fails only on old kernels
    ::munmap(p, kPages * page);
    GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE";
  }
  EXPECT_EQ(Resident(at, kPages, page),
            (std::vector<bool>{false, false, true, false, false, false, true}));

  // From the middle of page 1 into the first bytes of page 4.
  EXPECT_TRUE(PopulatePages(at + page + page / 2, 2 * page + page / 2 + 10));
  EXPECT_EQ(Resident(at, kPages, page),
            (std::vector<bool>{false, true, true, true, true, false, true}));
  for (size_t i = 0; i < 300; ++i) ASSERT_EQ(at[2 * page + 100 + i], 0x5a) << i;
  EXPECT_EQ(at[2 * page + 99], 0);
  EXPECT_EQ(at[page + page / 2], 0);
  EXPECT_TRUE(PopulatePages(at, 0));
  ::munmap(p, kPages * page);
}

}  // namespace
}  // namespace colibri
