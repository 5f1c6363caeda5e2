// API keys: the bearer header, the comparison, the key file.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <string>

#include "gateway/auth.h"

namespace chorus {
namespace {

TEST(Auth, BearerTokenIsTheWordAfterTheScheme) {
  EXPECT_EQ(bearer_token("Bearer sk-abc"), "sk-abc");
  EXPECT_EQ(bearer_token("bearer sk-abc"), "sk-abc");  // the scheme in any case (RFC 7235)
  EXPECT_EQ(bearer_token("  BEARER \t sk-abc  "), "sk-abc");
  EXPECT_FALSE(bearer_token(""));
  EXPECT_FALSE(bearer_token("Bearer"));
  EXPECT_FALSE(bearer_token("Bearer   "));
  EXPECT_FALSE(bearer_token("Basic dXNlcjpwYXNz"));
  EXPECT_FALSE(bearer_token("Bearersk-abc"));
  EXPECT_FALSE(bearer_token("sk-abc"));
}

TEST(Auth, OnlyAListedKeyIsAllowed) {
  const std::vector<std::string> keys = {"sk-one", "sk-second-key"};
  EXPECT_TRUE(key_allowed("sk-one", keys));
  EXPECT_TRUE(key_allowed("sk-second-key", keys));
  for (const char* bad : {"", "sk-on", "sk-one ", "sk-onf", "SK-ONE", "sk-second-ke", "sk-second-keyy", "x"})
    EXPECT_FALSE(key_allowed(bad, keys)) << bad;
  EXPECT_FALSE(key_allowed("sk-one", {}));
  EXPECT_FALSE(key_allowed(std::string("sk-one\0", 7), keys));  // a NUL is not the end
}

std::string temp_file(const std::string& text) {
  char path[] = "/tmp/chorus-keys-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(Auth, KeyFileReadsOneKeyPerLineAndNamesBadLines) {
  const std::string good = temp_file("# the team's keys\n\nsk-one\n  sk-two  \r\n# sk-old\nsk-three");
  auto keys = read_key_file(good);
  ASSERT_TRUE(keys.ok()) << keys.error().message;
  EXPECT_EQ(*keys, (std::vector<std::string>{"sk-one", "sk-two", "sk-three"}));
  std::remove(good.c_str());

  const std::string spaced = temp_file("sk-one\nsk two\n");
  auto bad = read_key_file(spaced);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::bad_format);
  EXPECT_NE(bad.error().message.find(spaced + ":2:"), std::string::npos) << bad.error().message;
  std::remove(spaced.c_str());

  const std::string empty = temp_file("# nothing but comments\n\n");
  auto none = read_key_file(empty);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("no API key"), std::string::npos) << none.error().message;
  std::remove(empty.c_str());

  auto missing = read_key_file("/nonexistent/keys");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::io);
}

}  // namespace
}  // namespace chorus
