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

/// One random call's verdicts: the Rust front door's `rust`, and the one it must give
/// ([`expected`] of the raw C check of the `mamba_ssu_args` a C caller fills for `named`, `form`,
/// `cache_steps` and the seed), with `what` describing the call.
#[allow(clippy::too_many_arguments)]
pub(super) fn verdicts<T>(
    rust: &Result<T>,
    named: &[(&'static str, Option<TensorLayout>); 16],
    form: u32,
    cache_steps: usize,
    seed: Option<SeedSpec>,
    rounds: u32,
    rule: SrRule,
    what: String,
) -> Option<(Verdict, Verdict, String)> {
    let raw = raw_args(named, form, cache_steps, raw_seed(seed, rounds, rule));
    let want = expected(c_verdict(&raw), named, seed, rounds);
    Some((rust_verdict(rust), want, what))
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

/// One element short of `l`'s buffer (its largest reachable element then lies outside it).
pub(super) fn shorten(l: &mut TensorLayout) {
    let len = l.max_offset().unwrap_or(l.len());
    *l = TensorLayout::new(l.dtype(), l.shape(), l.strides(), len).expect("a valid layout");
}

/// [`shorten`] of one of `layouts`, picked at random (the mutation of a Rust-only rule).
pub(super) fn shorten_one<const N: usize>(rng: &mut Rng, layouts: [&mut TensorLayout; N]) {
    let k = (rng.next() % N as u64) as usize;
    if let Some(l) = layouts.into_iter().nth(k) {
        shorten(l);
    }
}

/// What the random calls of both forms share: the sizes, dtypes and SR settings, and which of
/// the optional per-head and gate tensors are given; drawn valid, then at most one of them
/// mutated to a limit, an overflowing value or a wrong dtype.
#[derive(Clone, Copy, Debug)]
pub(super) struct Common {
    pub(super) batch: usize,
    pub(super) nheads: usize,
    pub(super) dim: usize,
    pub(super) dstate: usize,
    pub(super) ngroups: usize,
    pub(super) slots: usize,
    pub(super) rounds: u32,
    pub(super) sr_rule: SrRule,
    pub(super) state: DType,
    pub(super) input: DType,
    pub(super) weight: DType,
    pub(super) index: DType,
    pub(super) seed: Option<SeedSpec>,
    pub(super) with_d: bool,
    pub(super) with_z: bool,
    pub(super) with_bias: bool,
}

impl Common {
    /// A valid draw, then mutation `m` when it is one of these (0..13; a form numbers its own
    /// mutations from 13 on).
    pub(super) fn draw(rng: &mut Rng, m: u64) -> Option<Self> {
        let f = [DType::F16, DType::BF16, DType::F32];
        let nheads = rng.pick(&[1usize, 2, 4, 6, 64, 8192]);
        let ngroups = rng.pick(&[1usize, 2]).min(nheads);
        let rounds = rng.pick(&[0u32, 5, 10]);
        let batch = rng.pick(&[1usize, 2, 3, 5, 64, 512]);
        let mut c = Common {
            batch,
            nheads,
            dim: rng.pick(&[1usize, 2, 7, 8, 64, 100]),
            dstate: rng.pick(&[64usize, 128, 256]),
            ngroups: if nheads % ngroups == 0 { ngroups } else { 1 },
            slots: batch + rng.pick(&[0usize, 1, 7]),
            rounds,
            sr_rule: rng.pick(&[SrRule::V072, SrRule::V074]),
            state: if rounds > 0 { DType::F16 } else { rng.pick(&f) },
            input: rng.pick(&f),
            weight: rng.pick(&f),
            index: rng.pick(&[DType::I32, DType::I64]),
            seed: match rng.next() % 3 {
                0 => Some(SeedSpec::FromGenerator {
                    offset: 4 * (rng.next() % 1000),
                }),
                1 => Some(SeedSpec::FromValues {
                    seed: rng.next(),
                    offset: 8,
                }),
                _ => Some(SeedSpec::Pointer(try_lay(DType::I64, &[1], &[1])?)),
            },
            with_d: rng.chance(70),
            with_z: rng.chance(50),
            with_bias: rng.chance(70),
        };
        match m {
            0 => c.batch = rng.pick(&[0, 1 << 20, (1 << 29) - 1, 1 << 29, 1 << 31, 1 << 40]),
            1 => c.nheads = rng.pick(&[0, 1 << 20, 1 << 29, 1 << 31, 3 << 30]),
            2 => c.dim = rng.pick(&[1 << 20, 1 << 30, (1 << 30) + 1, 1 << 40]),
            3 => c.dstate = rng.pick(&[0, 16, 32, 160, 512]),
            4 => c.ngroups = rng.pick(&[3, c.nheads + 1, 0]),
            5 => c.slots = rng.pick(&[c.batch.saturating_sub(1), 0, 1 << 40]),
            6 => c.state = rng.pick(&[DType::I32, DType::I64, DType::BF16, DType::F32]),
            7 => c.input = rng.pick(&[DType::I32, DType::I64]),
            8 => c.weight = rng.pick(&[DType::I32, DType::I64]),
            9 => c.index = rng.pick(&[DType::F32, DType::F16]),
            10 => c.rounds = rng.pick(&[1, 2, 9, 11, 64]),
            11 => {
                c.seed = rng.pick(&[
                    None,
                    Some(SeedSpec::FromGenerator { offset: 6 }),
                    Some(SeedSpec::FromValues { seed: 1, offset: 2 }),
                    Some(SeedSpec::Pointer(try_lay(DType::I32, &[1], &[1])?)),
                    Some(SeedSpec::Pointer(try_lay(DType::I64, &[2], &[1])?)),
                ])
            }
            12 => {
                (c.with_d, c.with_z, c.with_bias) = (rng.chance(50), rng.chance(50), rng.chance(50))
            }
            _ => {}
        }
        Some(c)
    }

    /// `n` rounded up to a 16-byte multiple of `dtype` elements.
    pub(super) fn aligned(n: usize, dtype: DType) -> Option<usize> {
        let a = 16 / dtype.size_bytes();
        n.div_ceil(a).checked_mul(a)
    }

    /// The state (slots, nheads, dim, dstate) with slot stride `slot_stride`.
    pub(super) fn state(&self, slot_stride: usize) -> Option<TensorLayout> {
        let head = self.dim.checked_mul(self.dstate)?;
        try_lay(
            self.state,
            &[self.slots, self.nheads, self.dim, self.dstate],
            &[slot_stride, head, self.dstate, 1],
        )
    }

    /// The smallest aligned slot stride.
    pub(super) fn slot_stride(&self) -> Option<usize> {
        let slot = self
            .nheads
            .checked_mul(self.dim)?
            .checked_mul(self.dstate)?;
        Self::aligned(slot, self.state)
    }

    /// `A` (nheads, dim, dstate), strides (1, 0, 0).
    pub(super) fn a(&self) -> Option<TensorLayout> {
        try_lay(
            DType::F32,
            &[self.nheads, self.dim, self.dstate],
            &[1, 0, 0],
        )
    }

    /// A per-head weight (`D`, `dt_bias`) when `on`: `Some(None)` when off, `None` when the
    /// layout overflows.
    pub(super) fn per_head(&self, on: bool) -> Option<Option<TensorLayout>> {
        given(on, try_lay(self.weight, &[self.nheads, self.dim], &[1, 0]))
    }
}

/// An optional tensor: `Some(None)` when not given, `Some(layout)` when given and built, `None`
/// when given but its layout overflows.
pub(super) fn given(on: bool, l: Option<TensorLayout>) -> Option<Option<TensorLayout>> {
    if on {
        l.map(Some)
    } else {
        Some(None)
    }
}

/// The tensor arguments of `mamba_ssu_args` under FlashInfer's names, in its order, none given
/// (what a call's tensors are listed in, for [`raw_args`] and [`expected`]).
pub(super) const NAMED_NONE: [(&str, Option<TensorLayout>); 16] = [
    ("state", None),
    ("x", None),
    ("dt", None),
    ("A", None),
    ("B", None),
    ("C", None),
    ("D", None),
    ("z", None),
    ("dt_bias", None),
    ("out", None),
    ("state_batch_indices", None),
    ("dst_state_batch_indices", None),
    ("intermediate_states_buffer", None),
    ("intermediate_state_indices", None),
    ("cu_seqlens", None),
    ("num_accepted_tokens", None),
];

/// `tensors` (the first of [`NAMED_NONE`]'s, in its order) under their names, the rest absent.
pub(super) fn named_of<const N: usize>(
    tensors: [Option<TensorLayout>; N],
) -> [(&'static str, Option<TensorLayout>); 16] {
    let mut n = NAMED_NONE;
    for (k, l) in tensors.into_iter().enumerate() {
        n[k].1 = l;
    }
    n
}

/// The tensors of a spec (an `SsuSpec` or `MtpSpec`: the fields both have, then `extra`, the
/// multi-token ones) under their C names ([`named_of`]).
macro_rules! named {
    ($spec:expr $(, $extra:expr)* $(,)?) => {
        $crate::ssu::props::named_of([
            Some($spec.state),
            Some($spec.x),
            Some($spec.dt),
            Some($spec.a),
            Some($spec.b),
            Some($spec.c),
            $spec.d,
            $spec.z,
            $spec.dt_bias,
            Some($spec.out),
            $spec.state_batch_indices,
            $spec.dst_state_batch_indices,
            $($extra,)*
        ])
    };
}
pub(super) use named;

/// The `mamba_ssu_args` a C caller fills for the tensors of `named` (FlashInfer's names in
/// `mamba_ssu_args` order), the form asked for, `cache_steps` and the seed.
pub(super) fn raw_args(
    named: &[(&'static str, Option<TensorLayout>); 16],
    form: u32,
    cache_steps: usize,
    seed: sys::mamba_ssu_seed,
) -> sys::mamba_ssu_args {
    let t = |k: usize| raw_tensor(named[k].1, k + 1);
    sys::mamba_ssu_args {
        state: t(0),
        x: t(1),
        dt: t(2),
        A: t(3),
        B: t(4),
        C: t(5),
        D: t(6),
        z: t(7),
        dt_bias: t(8),
        out: t(9),
        state_batch_indices: t(10),
        dst_state_batch_indices: t(11),
        intermediate_states: t(12),
        intermediate_state_indices: t(13),
        cu_seqlens: t(14),
        num_accepted_tokens: t(15),
        pad_slot_id: -1,
        cache_steps: cache_steps as i64,
        form: form as i32,
        seed,
        ..Default::default()
    }
}

/// A rejection case of a front door: a change to a valid call, whether the error is
/// `Unsupported` (else `InvalidArgument`), the argument it must name and a piece of its message.
pub(super) type Case<S> = (fn(&mut S), bool, &'static str, &'static str);

/// Applies each case to `base()` and checks `validate`'s rejection (the argument is not
/// repeated at the start of the message).
pub(super) fn check_cases<S, P: std::fmt::Debug>(
    base: fn() -> S,
    validate: fn(&S) -> Result<P>,
    cases: &[Case<S>],
) {
    for (i, (change, unsupported, argument, needle)) in cases.iter().enumerate() {
        let mut spec = base();
        change(&mut spec);
        let (got_unsupported, got, message) = match validate(&spec) {
            Err(Error::InvalidArgument { argument, message }) => (false, argument, message),
            Err(Error::Unsupported { argument, message }) => (true, argument, message),
            other => panic!("case {i} ({argument}): expected an error, got {other:?}"),
        };
        assert_eq!(
            (got_unsupported, got),
            (*unsupported, *argument),
            "case {i}: {message}"
        );
        assert!(
            message.contains(needle),
            "case {i}: {message:?} lacks {needle:?}"
        );
        assert!(
            !message.starts_with(&format!("{argument}:")),
            "case {i}: the argument is repeated in {message:?}"
        );
    }
}
