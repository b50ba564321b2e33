//! Test support of the property tests of both forms: random calls through the Rust front door
//! (`validate`, `validate_mtp`) agree with the raw C check (`mamba_ssu_check` of a
//! `mamba_ssu_args` the test fills itself, as a C caller would from the same tensors) — the
//! same verdict, the same error kind and the same argument named — except where a rule only the
//! Rust layer sees fires (a tensor reaching past its buffer, a seed tensor that is not one
//! int64), which the test predicts on its own.

use std::collections::BTreeMap;
use std::ffi::CStr;

use crate::error::{Error, Result};
use crate::ffi::sys;
use crate::reference::SrRule;
use crate::tensor::{DType, TensorLayout};

use super::SeedSpec;

/// A small deterministic generator (SplitMix64).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn pick<V: Copy>(&mut self, v: &[V]) -> V {
        v[(self.next() % v.len() as u64) as usize]
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A layout over an exactly long enough buffer (empty for a tensor with no element), or None
/// where its extent overflows usize.
pub(super) fn try_lay(dtype: DType, shape: &[usize], strides: &[usize]) -> Option<TensorLayout> {
    if shape.contains(&0) {
        return TensorLayout::new(dtype, shape, strides, 0).ok();
    }
    let mut max = 0usize;
    for (n, s) in shape.iter().zip(strides) {
        max = max.checked_add((n - 1).checked_mul(*s)?)?;
    }
    TensorLayout::new(dtype, shape, strides, max.checked_add(1)?).ok()
}

/// The kind of a verdict: 0 accepted, 1 invalid (argument or value), 2 unsupported.
pub(super) type Verdict = (u8, String);

/// The descriptor a C caller passes for `l` (absent: rank 0) at a 4 KiB-aligned address of its
/// own.
pub(super) fn raw_tensor(l: Option<TensorLayout>, k: usize) -> sys::mamba_ssu_tensor {
    let mut t = sys::mamba_ssu_tensor::default();
    if let Some(l) = l {
        t.data = (0x7000_0000usize + 0x1000 * k) as *mut std::ffi::c_void;
        t.dtype = l.dtype().ffi();
        t.rank = l.rank() as i32;
        for (j, (n, s)) in l.shape().iter().zip(l.strides()).enumerate() {
            t.shape[j] = *n as i64;
            t.strides[j] = *s as i64;
        }
    }
    t
}

/// The seed a C caller passes for the Rust API's seed, rounds and rule: no rounds, no seed
/// read; rounds without a seed, a NULL `rand_seed`.
pub(super) fn raw_seed(seed: Option<SeedSpec>, rounds: u32, rule: SrRule) -> sys::mamba_ssu_seed {
    let mut s = sys::mamba_ssu_seed {
        rounds: rounds as i32,
        rule: i32::from(rule == SrRule::V074),
        ..Default::default()
    };
    if rounds == 0 {
        return s;
    }
    match seed {
        None => s.mode = sys::MAMBA_SSU_SEED_MODE_POINTER as i32,
        Some(SeedSpec::Pointer(_)) => {
            s.mode = sys::MAMBA_SSU_SEED_MODE_POINTER as i32;
            s.pointer = 0x7F00_0000usize as *const i64;
        }
        Some(SeedSpec::FromGenerator { offset }) => {
            s.mode = sys::MAMBA_SSU_SEED_MODE_DERIVED as i32;
            s.position.seed_ptr = 0x7F10_0000usize as *const i64;
            s.position.offset_ptr = 0x7F10_0008usize as *const i64;
            s.position.offset = offset;
        }
        Some(SeedSpec::FromValues { seed, offset }) => {
            s.mode = sys::MAMBA_SSU_SEED_MODE_DERIVED as i32;
            s.position.seed = seed;
            s.position.offset = offset;
        }
    }
    s
}

/// The raw C check's verdict on `args`.
pub(super) fn c_verdict(args: &sys::mamba_ssu_args) -> Verdict {
    // SAFETY: the check reads `args` only (never the memory behind its pointers); the argument
    // it names is a static string, copied at once.
    let (status, argument) = unsafe {
        let status = sys::mamba_ssu_check(args, std::ptr::null_mut());
        let argument = CStr::from_ptr(sys::mamba_ssu_last_error_argument());
        (status, argument.to_string_lossy().into_owned())
    };
    match status as u32 {
        sys::MAMBA_SSU_SUCCESS => (0, String::new()),
        sys::MAMBA_SSU_ERROR_UNSUPPORTED => (2, argument),
        _ => (1, argument),
    }
}

/// The Rust front door's verdict.
pub(super) fn rust_verdict<T>(r: &Result<T>) -> Verdict {
    match r {
        Ok(_) => (0, String::new()),
        Err(Error::InvalidArgument { argument, .. }) => (1, argument.to_string()),
        Err(Error::Unsupported { argument, .. }) => (2, argument.to_string()),
        Err(e) => panic!("unexpected error kind {e:?}"),
    }
}

/// The verdict the Rust front door must give: first a tensor (in `mamba_ssu_args` order)
/// whose size or stride does not fit `int64_t` (the C caller's cast above wraps it); then the
/// C check's rejection as it is; on a call C accepts, the first tensor whose reach leaves its
/// buffer, then a seed tensor that is not one int64 (with rounds); else acceptance.
pub(super) fn expected(
    c: Verdict,
    tensors: &[(&'static str, Option<TensorLayout>)],
    seed: Option<SeedSpec>,
    rounds: u32,
) -> Verdict {
    let too_big = |l: &TensorLayout| {
        l.shape()
            .iter()
            .chain(l.strides())
            .any(|&v| v > i64::MAX as usize)
    };
    if let Some((name, _)) = tensors
        .iter()
        .find(|(_, l)| l.as_ref().is_some_and(too_big))
    {
        return (1, name.to_string());
    }
    if c.0 != 0 {
        return c;
    }
    for (name, l) in tensors {
        let Some(l) = l else { continue };
        let mut reach = Some(0usize);
        let mut empty = false;
        for (n, s) in l.shape().iter().zip(l.strides()) {
            empty |= *n == 0;
            reach = reach.and_then(|r| r.checked_add(n.checked_sub(1)?.checked_mul(*s)?));
        }
        if !empty && !matches!(reach, Some(r) if r < l.len()) {
            return (1, name.to_string());
        }
    }
    if let (Some(SeedSpec::Pointer(l)), true) = (seed, rounds > 0) {
        if l.dtype() != DType::I64 || l.shape().iter().product::<usize>() != 1 || l.is_empty() {
            return (1, "rand_seed".to_string());
        }
    }
    (0, String::new())
}

/// Runs `cases` random calls (`next` yields the Rust verdict and the expected one, or None for
/// a draw it cannot build) and asserts that they agree, and that acceptances and both kinds of
/// rejection are all covered; returns how many calls each argument's rejection covered.
pub(super) fn agree(
    cases: usize,
    mut next: impl FnMut() -> Option<(Verdict, Verdict, String)>,
) -> BTreeMap<String, usize> {
    let (mut done, mut tries) = (0usize, 0usize);
    let mut kinds = BTreeMap::new();
    let mut named = BTreeMap::new();
    let mut mismatches: Vec<String> = Vec::new();
    while done < cases {
        tries += 1;
        assert!(tries < 50 * cases, "the generator yields too few cases");
        let Some((rust, want, what)) = next() else {
            continue;
        };
        done += 1;
        if rust != want {
            mismatches.push(format!("Rust {rust:?} vs expected {want:?}: {what}"));
        }
        *kinds.entry(rust.0).or_insert(0usize) += 1;
        *named.entry(rust.1).or_insert(0usize) += 1;
    }
    mismatches.sort();
    mismatches.dedup_by(|a, b| a.split(": ").next() == b.split(": ").next());
    assert!(
        mismatches.is_empty(),
        "{} kinds of disagreement:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(
        kinds.len() == 3 && kinds[&0] > cases / 20,
        "coverage: {kinds:?}"
    );
    named
}
