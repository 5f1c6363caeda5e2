#!/usr/bin/env bash
# The installed package, used as an embedder would: `cmake --install` into a prefix, examples/
# configured and built out of tree with find_package(chorus) against that prefix alone, and
# tokenize_chat.cpp compiled by hand with pkg-config. The binaries must link the installed
# libchorus.so (not the tree's) and print what the tree's own examples print.
#   tests/install/test_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUILD=$(cd "$2" && pwd)
# A fixed place under the build tree, so that ccache hits when the test runs again.
WORK=$BUILD/install-test
PREFIX=$WORK/prefix
rm -rf "$WORK"
mkdir -p "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }
# Whether binary $1 loads the installed libchorus.so (ldd's path, links resolved).
loads_installed() {
  local path
  path=$(ldd "$1" | awk '/libchorus\.so/ {print $3}')
  [ -n "$path" ] && [ "$(readlink -f "$path")" = "$(readlink -f "$PREFIX/lib/libchorus.so")" ]
}

cmake --install "$BUILD" --prefix "$PREFIX" > "$WORK/install.log" || { cat "$WORK/install.log"; fail "cmake --install"; }
for f in lib/libchorus.so lib/cmake/chorus/chorus-config.cmake lib/cmake/chorus/chorusTargets.cmake \
         lib/pkgconfig/chorus.pc include/chorus/chorus.h include/chorus/actors/program.h \
         include/chorus/schemas/envelope_generated.h bin/chorus; do
  [ -e "$PREFIX/$f" ] || fail "not installed: $f"
done
# Nothing installed may point back into the source or build tree.
if grep -rl --exclude=install_manifest.txt -e "$SRC/" "$PREFIX/lib/cmake" "$PREFIX/lib/pkgconfig"; then
  fail "the package config names the source tree"
fi

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
cmake -S "$SRC/examples" -B "$WORK/examples" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX" "${launcher[@]}" > "$WORK/configure.log" || { cat "$WORK/configure.log"; fail "configure examples/ against the package"; }
cmake --build "$WORK/examples" > "$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log"; fail "build examples/ against the package"; }
for exe in tokenize_chat thinker_writer embedded_sensor; do
  loads_installed "$WORK/examples/$exe" || { ldd "$WORK/examples/$exe"; fail "$exe does not load the installed libchorus.so"; }
done

PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --exists chorus || fail "pkg-config does not find chorus"
[ "$(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --modversion chorus)" = "$("$PREFIX/bin/chorus" --version | awk '{print $NF}')" ] ||
  fail "pkg-config's version is not the tool's"
# shellcheck disable=SC2046
g++ -std=c++20 -O1 "$SRC/examples/tokenize_chat.cpp" -o "$WORK/tokenize_chat_pc" \
  $(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs chorus) || fail "build with pkg-config"
loads_installed "$WORK/tokenize_chat_pc" || fail "the pkg-config build does not load the installed libchorus.so"

# Same output as the tree's example, from both builds.
question="What is the capital of France?"
want=$("$BUILD/examples/tokenize_chat" "$question")
[ -n "$want" ] || fail "the tree's tokenize_chat printed nothing"
[ "$("$WORK/examples/tokenize_chat" "$question")" = "$want" ] || fail "find_package build prints otherwise"
[ "$("$WORK/tokenize_chat_pc" "$question")" = "$want" ] || fail "pkg-config build prints otherwise"
# The actor runtime through the installed library: the sensor loop for one second.
"$WORK/examples/embedded_sensor" 1 > "$WORK/sensor.out" || { cat "$WORK/sensor.out"; fail "embedded_sensor"; }
grep -q "readings in" "$WORK/sensor.out" || { cat "$WORK/sensor.out"; fail "embedded_sensor's report missing"; }
echo "PASS: installed to $PREFIX; examples built with find_package and pkg-config print the tree's output"
