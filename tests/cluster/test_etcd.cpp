// The etcd client against a real etcd (tests/support/etcd_fixture.h).
#include <gtest/gtest.h>

#include <thread>

#include "cluster/etcd.h"
#include "tests/support/etcd_fixture.h"

namespace chorus::cluster {
namespace {

using EtcdTest = test::EtcdSuite;

// RFC 4648 section 10's test vectors.
TEST(Base64, RoundTripsTheRfcVectors) {
  const std::pair<const char*, const char*> v[] = {{"", ""},
                                                   {"f", "Zg=="},
                                                   {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},
                                                   {"foob", "Zm9vYg=="},
                                                   {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : v) {
    EXPECT_EQ(base64_encode(plain), coded);
    ASSERT_TRUE(base64_decode(coded).has_value()) << coded;
    EXPECT_EQ(*base64_decode(coded), plain);
  }
  const std::string bytes("\0\xff\x80/+", 5);
  EXPECT_EQ(*base64_decode(base64_encode(bytes)), bytes);
  // Not base64, or not canonical: "ear=" and "Zh==" set bits past their last byte (found by
  // cluster_record_fuzz: they decoded, and re-encoded to other text).
  for (const char* bad : {"Zg=", "Z===", "Zm9v!A==", "=Zm9", "Zg==Zg==", "ear=", "Zh=="})
    EXPECT_FALSE(base64_decode(bad)) << bad;
}

TEST_F(EtcdTest, KeysLeasesAndTransactions) {
  auto lease = etcd->grant(5);
  ASSERT_TRUE(lease.ok()) << lease.error().message;
  ASSERT_TRUE(etcd->put("/t/kv/a", "1").ok());
  ASSERT_TRUE(etcd->put("/t/kv/b", std::string("\0two", 4), *lease).ok());
  ASSERT_TRUE(etcd->put("/t/kw", "outside the prefix").ok());
  auto b = etcd->get("/t/kv/b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->value, std::string("\0two", 4));
  EXPECT_EQ((*b)->lease, *lease);
  EXPECT_GT((*b)->create_revision, 0);
  auto all = etcd->list("/t/kv/");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "/t/kv/a");
  EXPECT_EQ((*all)[1].key, "/t/kv/b");

  auto first = etcd->create("/t/once", "x");
  auto second = etcd->create("/t/once", "y");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(*first);
  EXPECT_FALSE(*second);
  EXPECT_EQ((*etcd->get("/t/once"))->value, "x");
  // A transaction on a stale revision changes nothing; on the current one it does all its puts.
  const int64_t rev = (*etcd->get("/t/once"))->mod_revision;
  auto stale = etcd->txn({{"/t/once", rev - 1}}, {{"/t/once", "z"}, {"/t/also", "z"}});
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(*stale);
  EXPECT_FALSE(etcd->get("/t/also")->has_value());
  auto fresh = etcd->txn({{"/t/once", rev}, {"/t/also", 0}}, {{"/t/once", "z"}, {"/t/also", "z"}});
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(*fresh);
  EXPECT_EQ((*etcd->get("/t/also"))->value, "z");

  auto ttl = etcd->keepalive(*lease);
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(etcd->revoke(*lease).ok());
  EXPECT_FALSE(etcd->get("/t/kv/b")->has_value()) << "a key goes with its lease";
  ttl = etcd->keepalive(*lease);
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(*ttl, 0) << "a revoked lease cannot be renewed";
  ASSERT_TRUE(etcd->erase("/t/kv/a").ok());
  EXPECT_FALSE(etcd->get("/t/kv/a")->has_value());
}

TEST_F(EtcdTest, ALeaseNotRenewedExpires) {
  auto lease = etcd->grant(1);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(etcd->put("/t/expiring", "x", *lease).ok());
  bool gone = false;
  for (int i = 0; i < 60 && !gone; ++i) {  // etcd expires a 1 s lease within about 1-2 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = !etcd->get("/t/expiring")->has_value();
  }
  EXPECT_TRUE(gone);
  EXPECT_EQ(*etcd->keepalive(*lease), 0);
}

TEST(Etcd, AnUnreachableEtcdIsAClearError) {
  EXPECT_EQ(EtcdClient::open("127.0.0.1:2379").error().code, Errc::invalid_argument);
  auto c = EtcdClient::open("http://127.0.0.1:" + std::to_string(test::free_port()), 0.5);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->grant(3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::io);
  EXPECT_NE(r.error().message.find("/v3/lease/grant"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace chorus::cluster
