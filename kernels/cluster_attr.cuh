// CLUSTER_ATTR: a kernel attribute that launches thread-block clusters of KS consecutive blocks in x
// (__cluster_dims__(KS, 1, 1)) when the launcher defines KS > 1, and nothing otherwise (KS defaults
// to 1). For the probes (kernels/probe_copy.cu, kernels/probe_placement.cu).
#pragma once

#ifndef KS
#define KS 1
#endif

#if KS > 1
#define CLUSTER_ATTR __cluster_dims__(KS, 1, 1)
#else
#define CLUSTER_ATTR
#endif
