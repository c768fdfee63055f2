// Compiled by ctest (tests/CMakeLists.txt) with one module's include view: a module the map
// lets see `server` compiles it; `limiter`, which may include only core and config, must not.
#include "tokengate/server/gateway.hpp"

int main() { return 0; }
