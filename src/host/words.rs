//! Words the hot paths write on every call (field names, state words, small numbers), created
//! once at load and freed at unload, so no call allocates them.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::protocol::{EmqError, Field, Meta, State};

use super::string::{release, retained, Str};

pub struct Words {
    fields: [Str<'static>; Field::ALL.len()],
    states: [Str<'static>; STATES.len()],
    metas: [Str<'static>; Meta::ALL.len()],
    /// `0` to `SMALL - 1`: a job's attempts, as a claim writes them.
    small: [Str<'static>; SMALL],
    pub zero: Str<'static>,
}

/// How many of the small numbers are made at load.
const SMALL: usize = 32;

// SAFETY: the strings are only touched on the server's main thread.
unsafe impl Send for Words {}
unsafe impl Sync for Words {}

const FIELDS: [Field; Field::ALL.len()] = Field::ALL;
const STATES: [State; 6] = [
    State::Pending,
    State::Scheduled,
    State::Active,
    State::Done,
    State::Dead,
    State::Waiting,
];

impl Words {
    pub fn field(&self, field: Field) -> Str<'static> {
        self.fields[field as usize]
    }

    pub fn state(&self, state: State) -> Str<'static> {
        self.states[state as usize]
    }

    /// The decimal text of `n` where it is one of the small numbers made at load.
    pub fn small(&self, n: i64) -> Option<Str<'static>> {
        usize::try_from(n)
            .ok()
            .and_then(|n| self.small.get(n))
            .copied()
    }

    /// A `meta` fact's field name.
    pub fn meta(&self, meta: Meta) -> Str<'static> {
        self.metas[meta.index()]
    }

    fn all(&self) -> impl Iterator<Item = Str<'static>> + '_ {
        self.fields
            .iter()
            .chain(&self.states)
            .chain(&self.metas)
            .chain(&self.small)
            .chain(std::iter::once(&self.zero))
            .copied()
    }
}

static WORDS: AtomicPtr<Words> = AtomicPtr::new(ptr::null_mut());

/// Creates the words (module load).
pub fn init() -> Result<(), EmqError> {
    let w = |t: &[u8]| retained(t).ok_or(EmqError::Internal);
    let mut fields = Vec::with_capacity(FIELDS.len());
    for f in FIELDS {
        fields.push(w(f.as_bytes())?);
    }
    let mut states = Vec::with_capacity(STATES.len());
    for s in STATES {
        states.push(w(s.as_bytes())?);
    }
    let mut metas = Vec::with_capacity(Meta::ALL.len());
    for m in Meta::ALL {
        metas.push(w(m.as_bytes())?);
    }
    let mut small = Vec::with_capacity(SMALL);
    for n in 0..SMALL {
        small.push(w(n.to_string().as_bytes())?);
    }
    let words = Box::new(Words {
        fields: fields.try_into().map_err(|_| EmqError::Internal)?,
        states: states.try_into().map_err(|_| EmqError::Internal)?,
        metas: metas.try_into().map_err(|_| EmqError::Internal)?,
        small: small.try_into().map_err(|_| EmqError::Internal)?,
        zero: w(b"0")?,
    });
    free(WORDS.swap(Box::into_raw(words), Ordering::SeqCst));
    Ok(())
}

/// Frees the words (module unload).
pub fn free_all() {
    free(WORDS.swap(ptr::null_mut(), Ordering::SeqCst));
}

fn free(words: *mut Words) {
    if words.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `init`, swapped out exactly once.
    let words = unsafe { Box::from_raw(words) };
    for s in words.all() {
        if let Some(p) = std::ptr::NonNull::new(s.as_ptr()) {
            release(p);
        }
    }
}

/// The words, or `Internal` before load.
pub fn words() -> Result<&'static Words, EmqError> {
    let p = WORDS.load(Ordering::Acquire);
    // SAFETY: set at load, cleared only at unload, when no command runs.
    unsafe { p.as_ref() }.ok_or(EmqError::Internal)
}
