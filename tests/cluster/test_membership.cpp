// Node membership and coordinator election against a real etcd (tests/support/etcd_fixture.h).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cluster/election.h"
#include "cluster/membership.h"
#include "engine/model/model.h"
#include "tests/support/etcd_fixture.h"
#include "tests/support/test_util.h"

namespace chorus::cluster {
namespace {

struct MembershipTest : test::EtcdSuite {
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(EtcdSuite::SetUp());
    opts.etcd_url = server->url;
    opts.cluster = ::testing::UnitTest::GetInstance()->current_test_info()->name();  // a cluster per test
    opts.ttl_s = 1;
    opts.name_wait_s = 0;
  }
  static NodeRecord record(const std::string& name, const std::string& fingerprint = "00000000000000aa") {
    NodeRecord r;
    r.name = name;
    r.endpoint = "tcp://127.0.0.1:1";
    r.pages = 64;
    r.model = {"m", "llama", "m.gguf", fingerprint};
    return r;
  }
  std::vector<NodeRecord> live() { return *list_nodes(*etcd, ClusterKeys(opts.cluster)); }
  // Waits up to 10 s for `cond`.
  template <class F>
  static bool eventually(F cond) {
    for (int i = 0; i < 200; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return cond();
  }

  MembershipOptions opts;
};

TEST_F(MembershipTest, NodesJoinWithGrowingEpochsAndLeaveWithTheirLease) {
  auto a = NodeMembership::join(opts, record("a"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = NodeMembership::join(opts, record("b"));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_GT((*b)->epoch(), (*a)->epoch());
  auto nodes = live();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "a");
  EXPECT_EQ(nodes[0].epoch, (*a)->epoch());
  EXPECT_EQ(nodes[0].lease, (*a)->lease());
  EXPECT_EQ(nodes[1].pages, 64);
  EXPECT_EQ(nodes[1].model.fingerprint, "00000000000000aa");
  // Kept alive: still there after three TTLs.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_EQ(live().size(), 2u);
  a->reset();  // leaves: revoked, gone at once
  nodes = live();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].name, "b");
}

TEST_F(MembershipTest, ANodeOfAnotherModelIsRefusedWhileTheClusterHasLiveNodes) {
  auto a = NodeMembership::join(opts, record("a"));
  ASSERT_TRUE(a.ok());
  auto other = NodeMembership::join(opts, record("b", "00000000000000bb"));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, Errc::invalid_argument);
  EXPECT_NE(other.error().message.find("a cluster serves one model"), std::string::npos)
      << other.error().message;
  EXPECT_NE(other.error().message.find("00000000000000bb"), std::string::npos) << other.error().message;
  EXPECT_EQ(live().size(), 1u) << "the refused node left no record";
  // With no live node left, a node of another model may take the cluster over.
  a->reset();
  auto c = NodeMembership::join(opts, record("c", "00000000000000cc"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto m = ModelIdentity::from_json((*etcd->get(ClusterKeys(opts.cluster).model()))->value);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->fingerprint, "00000000000000cc");
}

TEST_F(MembershipTest, ANameHeldByALiveNodeIsRefusedAndFreedByItsLease) {
  auto a = NodeMembership::join(opts, record("a"));
  ASSERT_TRUE(a.ok());
  auto again = NodeMembership::join(opts, record("a"));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("live node named `a`"), std::string::npos) << again.error().message;
  // A predecessor that died a moment ago: the name is waited for until its lease expires.
  const int64_t old_lease = (*a)->lease();
  std::unique_ptr<NodeMembership> dead = std::move(*a);
  dead.reset();  // revoked; put a stale holder back on a short lease nobody renews
  auto short_lease = etcd->grant(1);
  ASSERT_TRUE(etcd->put(ClusterKeys(opts.cluster).node("a"), record("a").to_json(), *short_lease).ok());
  MembershipOptions waiting = opts;
  waiting.name_wait_s = 5;
  auto next = NodeMembership::join(waiting, record("a"));
  ASSERT_TRUE(next.ok()) << next.error().message;
  EXPECT_NE((*next)->lease(), old_lease);
}

TEST_F(MembershipTest, ANodeThatLostItsLeaseJoinsAgainWithANewEpoch) {
  auto a = NodeMembership::join(opts, record("a"));
  ASSERT_TRUE(a.ok());
  const int64_t epoch = (*a)->epoch(), lease = (*a)->lease();
  ASSERT_TRUE(etcd->revoke(lease).ok());  // what expiry does to a node that was stopped past its TTL
  ASSERT_TRUE(eventually([&] { return (*a)->joins() == 2; }));
  EXPECT_GT((*a)->epoch(), epoch);
  EXPECT_NE((*a)->lease(), lease);
  auto nodes = live();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].epoch, (*a)->epoch());
}

TEST_F(MembershipTest, ANodeRefusedWhenItJoinsAgainIsTold) {
  auto a = NodeMembership::join(opts, record("a"));
  ASSERT_TRUE(a.ok());
  std::atomic<bool> refused{false};
  auto b = NodeMembership::join(opts, record("b"), [&](const Error&) { refused = true; });
  ASSERT_TRUE(b.ok());
  // While b is away, a lone node of another model takes the cluster: b may not come back.
  a->reset();
  ASSERT_TRUE(etcd->revoke((*b)->lease()).ok());
  auto c = NodeMembership::join(opts, record("c", "00000000000000cc"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(eventually([&] { return refused.load(); }));
}

// An actors-only node (`chorus node --no-model`) carries no model: it joins a cluster of any
// model, its labels come back from etcd as it wrote them, and a model node of another model is
// still refused beside it.
TEST_F(MembershipTest, AnActorsOnlyNodeJoinsWithItsLabelsAndNoModel) {
  auto a = NodeMembership::join(opts, record("a"));
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  NodeRecord edge;
  edge.name = "edge";
  edge.endpoint = "tcp://127.0.0.1:2";
  edge.actors_only = true;
  edge.labels = {{"role", "edge"}, {"site", "lab-2"}};
  auto e = NodeMembership::join(opts, edge);
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  const auto nodes = live();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_TRUE(nodes[1].actors_only);
  EXPECT_EQ(nodes[1].labels, edge.labels);
  EXPECT_TRUE(nodes[1].has_label("role=edge"));
  EXPECT_FALSE(nodes[1].has_label("role=tools"));
  EXPECT_FALSE(nodes[1].has_label("role"));
  EXPECT_TRUE(nodes[1].model.fingerprint.empty());
  EXPECT_FALSE(nodes[0].actors_only);
  auto other = NodeMembership::join(opts, record("b", "00000000000000bb"));
  EXPECT_FALSE(other.ok()) << "a model node of another model joined beside the actors-only one";
  // Labels as `--label` takes them.
  EXPECT_EQ(parse_label("role=edge")->second, "edge");
  EXPECT_EQ(parse_label("k=")->second, "");
  for (const char* bad : {"role", "=edge", "a b=c", "a/b=c"}) EXPECT_FALSE(parse_label(bad).ok()) << bad;
  // A record whose labels are not strings is refused, naming the field.
  auto bad = NodeRecord::from_json(R"({"name":"x","endpoint":"e","actors_only":true,"labels":{"k":1}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("label"), std::string::npos) << bad.error().message;
}

TEST_F(MembershipTest, BadNamesAndTtlsAreRefused) {
  EXPECT_EQ(NodeMembership::join(opts, record("")).error().code, Errc::invalid_argument);
  EXPECT_EQ(NodeMembership::join(opts, record("a/b")).error().code, Errc::invalid_argument);
  MembershipOptions zero = opts;
  zero.ttl_s = 0;
  EXPECT_EQ(NodeMembership::join(zero, record("a")).error().code, Errc::invalid_argument);
  // A record that does not parse is skipped, not fatal.
  ASSERT_TRUE(etcd->put(ClusterKeys(opts.cluster).node("junk"), "{not json").ok());
  EXPECT_TRUE(live().empty());
  // Found by cluster_record_fuzz: a field of another type made the model identity throw.
  EXPECT_EQ(ModelIdentity::from_json(R"({"name": {"name": "m"}, "fingerprint": "00"})").error().code,
            Errc::bad_format);
  // Found by cluster_record_fuzz: a number past int64's range in an integer field was converted
  // (undefined behaviour); a float there is a bad record, naming the field.
  for (const char* field : {"pages", "host_pages", "started_ms"}) {
    auto r = NodeRecord::from_json(std::string(R"({"name":"x","endpoint":"e","actors_only":true,")") + field +
                                   R"(":2.2e107})");
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.error().code, Errc::bad_format);
    EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(NodeRecord::from_json(R"({"name":"x","endpoint":"e","actors_only":true,"pages":7})")->pages, 7);
  ASSERT_TRUE(etcd->put(ClusterKeys(opts.cluster).model(), R"({"fingerprint": ["x"]})").ok());
  auto joined = NodeMembership::join(opts, record("a"));
  EXPECT_TRUE(joined.ok()) << "an unreadable model record with no live node is replaced: "
                           << (joined.ok() ? "" : joined.error().message);
}

TEST(ModelIdentity, TellsTwoFilesApartAndOneFileFromItself) {
  CHORUS_REQUIRE_DEFAULT_MODEL(gguf);
  auto smol = Model::load(default_model_path());
  auto tiny = Model::load(test::goldens_dir() + "/tiny_llama.gguf");
  auto tiny_kq = Model::load(test::goldens_dir() + "/tiny_llama_kq.gguf");
  ASSERT_TRUE(smol.ok() && tiny.ok() && tiny_kq.ok());
  const auto a = ModelIdentity::of(**smol, default_model_path());
  const auto a2 = ModelIdentity::of(**Model::load(default_model_path()), "/elsewhere/copy.gguf");
  const auto b = ModelIdentity::of(**tiny, "tiny_llama.gguf");
  const auto c = ModelIdentity::of(**tiny_kq, "tiny_llama_kq.gguf");
  EXPECT_TRUE(a.same_model(a2)) << "the path is not part of the identity";
  EXPECT_FALSE(a.same_model(b));
  EXPECT_FALSE(b.same_model(c)) << "same architecture, other tensor types";
  EXPECT_EQ(a.fingerprint.size(), 16u);
  auto back = ModelIdentity::from_json(a.to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->same_model(a));
  EXPECT_EQ(back->name, a.name);
}

TEST_F(MembershipTest, AStandbyTakesOverWhenTheLeaderGoes) {
  std::atomic<int> changes{0};
  auto one = Election::stand(opts, "one", "http://127.0.0.1:1", [&](bool, int64_t) { ++changes; });
  ASSERT_TRUE(one.ok());
  auto two = Election::stand(opts, "two", "http://127.0.0.1:2");
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE((*one)->leader());
  EXPECT_FALSE((*two)->leader());
  auto cur = (*two)->current();
  ASSERT_TRUE(cur.ok() && cur->has_value());
  EXPECT_EQ((*cur)->name, "one");
  EXPECT_EQ((*cur)->term, (*one)->term());
  const int64_t first_term = (*one)->term();
  // The leader's lease is lost (it was stopped past its TTL): it steps down, and a leader of a
  // later term is elected (the standby, or the old leader standing again).
  ASSERT_TRUE(etcd->revoke((*cur)->lease).ok());
  ASSERT_TRUE(eventually([&] { return changes.load() >= 2; })) << "one stepped down";
  ASSERT_TRUE(eventually([&] { return (*one)->leader() != (*two)->leader(); }));
  auto& leading = (*one)->leader() ? *one : *two;
  auto& standing = (*one)->leader() ? *two : *one;
  EXPECT_GT(leading->term(), first_term);
  // The leader goes (it resigns): the standby leads at once.
  leading.reset();
  ASSERT_TRUE(eventually([&] { return standing->leader(); }));
  cur = standing->current();
  ASSERT_TRUE(cur.ok() && cur->has_value());
  EXPECT_EQ((*cur)->term, standing->term());
  standing.reset();
  auto three = Election::stand(opts, "three", "http://127.0.0.1:3");
  ASSERT_TRUE(three.ok());
  EXPECT_TRUE((*three)->leader());
}

}  // namespace
}  // namespace chorus::cluster
