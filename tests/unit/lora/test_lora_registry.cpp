// LoraRegistry: names and slots, the --max-loras bound, and a slot that stays held while any
// user of an unloaded adapter remains, reused only after the owner cleared it.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

#include "engine/lora/lora_registry.h"

using namespace pagoda;

TEST_CASE("adapters take slots 1..max_loras; names are unique; a full registry refuses") {
  LoraRegistry r(2);
  auto ad = std::make_shared<LoraAdapter>();
  std::vector<int> installed;
  auto install = [&](int s) { installed.push_back(s); };
  auto a = r.add("a", ad, install);
  auto b = r.add("b", ad, install);
  CHECK(a->slot == 1);
  CHECK(b->slot == 2);
  CHECK(installed == std::vector<int>{1, 2});
  CHECK_THROWS_WITH(r.add("a", ad, install), Catch::Contains("already loaded"));
  CHECK_THROWS_WITH(r.add("c", ad, install), Catch::Contains("--max-loras"));
  CHECK(r.find("b") == b);
  CHECK(r.find("zz") == nullptr);
  REQUIRE(r.list().size() == 2);
  CHECK(r.list()[0]->name == "a");
}

TEST_CASE("an unloaded adapter's slot is reused only after its last user and the owner's clear") {
  LoraRegistry r(1);
  auto ad = std::make_shared<LoraAdapter>();
  auto nothing = [](int) {};
  auto user = r.add("a", ad, nothing);  // a running request holds its handle
  CHECK(r.remove("a"));
  CHECK_FALSE(r.remove("a"));
  CHECK(r.find("a") == nullptr);
  std::vector<int> cleared;
  r.reclaim([&](int s) { cleared.push_back(s); });
  CHECK(cleared.empty());                                  // still in use
  CHECK_THROWS_WITH(r.add("b", ad, nothing), Catch::Contains("--max-loras"));
  user.reset();                                            // the request ended
  CHECK_THROWS_WITH(r.add("b", ad, nothing), Catch::Contains("--max-loras"));  // not cleared yet
  r.reclaim([&](int s) { cleared.push_back(s); });
  CHECK(cleared == std::vector<int>{1});
  CHECK(r.add("b", ad, nothing)->slot == 1);
}

TEST_CASE("a failed install gives the slot back") {
  LoraRegistry r(1);
  auto ad = std::make_shared<LoraAdapter>();
  CHECK_THROWS(r.add("a", ad, [](int) { throw std::runtime_error("no"); }));
  CHECK(r.find("a") == nullptr);
  CHECK(r.add("a", ad, [](int) {})->slot == 1);
}
