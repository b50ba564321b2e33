// ssu_mtp_check.h — the multi-token contract check (ssu_mtp_check.cu), shared by the
// multi-token launcher, its plan and mamba_ssu_selective_state_update_mtp_check.
#pragma once

#include "include/mamba_ssu.h"

namespace mamba_ssu {

// Checks *p against the multi-token kernel's contract; records the detail and returns the
// status of the first violation (MAMBA_SSU_SUCCESS when none). Does not clear the error first.
int mtp_check(const mamba_ssu_mtp_params *p);

}  // namespace mamba_ssu
