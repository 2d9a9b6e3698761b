#pragma once
// Against the direction: plan/ is pure and may not include the layers.
#include "shardmesh/nn/parameter.hpp"
