#pragma once
// A pure folder that includes Kokkos.
#include <Kokkos_Core.hpp>
