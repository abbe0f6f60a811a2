//! Pin verbs: create, move aside and remove refs under `refs/ckpt/`, always compare-and-swap,
//! never with a reflog; list and read them. No other ref is ever written.

use gix::bstr::ByteSlice;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::Target;

use super::Vault;
use crate::verbs::types::{ObjectId, PinRef};
use crate::verbs::VerbError;

/// Valid pins with their targets, and names under `refs/ckpt/` that are not valid pins.
pub type PinListing = (Vec<(PinRef, ObjectId)>, Vec<String>);

impl Vault {
    /// Creates `pin` pointing at `commit`; with `expected_old`, replaces only that value.
    pub fn pin(&self, pin: &PinRef, commit: &ObjectId, expected_old: Option<&ObjectId>) -> Result<(), VerbError> {
        let kind = self
            .repo
            .find_header(commit.0)
            .map_err(|_| VerbError::MissingObject {
                id: *commit,
                what: "commit to pin",
            })?
            .kind();
        if kind != gix::objs::Kind::Commit {
            return Err(VerbError::git_because(
                format!("pinning {}", pin.as_str()),
                format!("{commit} is a {kind}, only commits may be pinned"),
            ));
        }
        let expected = match expected_old {
            Some(old) => PreviousValue::MustExistAndMatch(Target::Object(old.0)),
            None => PreviousValue::MustNotExist,
        };
        self.edit_pin(
            pin,
            Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "ckpt: pin".into(),
                },
                expected,
                new: Target::Object(commit.0),
            },
        )
    }

    /// Deletes `pin`, only if it still points at `expected`.
    pub fn unpin(&self, pin: &PinRef, expected: &ObjectId) -> Result<(), VerbError> {
        self.edit_pin(
            pin,
            Change::Delete {
                expected: PreviousValue::MustExistAndMatch(Target::Object(expected.0)),
                log: RefLog::AndReference,
            },
        )
    }

    /// Moves `pin` (which must point at `commit`) to its quarantine name: a new ref is made
    /// first, then the pin is removed, so the commit is referenced throughout. Returns the
    /// quarantine ref.
    pub fn quarantine(&self, pin: &PinRef, commit: &ObjectId) -> Result<PinRef, VerbError> {
        let aside = pin.quarantined();
        self.edit_pin(
            &aside,
            Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "ckpt: quarantine".into(),
                },
                expected: PreviousValue::Any,
                new: Target::Object(commit.0),
            },
        )?;
        self.unpin(pin, commit)?;
        Ok(aside)
    }

    fn edit_pin(&self, pin: &PinRef, change: Change) -> Result<(), VerbError> {
        let name = pin
            .as_str()
            .try_into()
            .map_err(|e| VerbError::git(format!("naming {}", pin.as_str()), e))?;
        let edit = RefEdit {
            change,
            name,
            deref: false,
        };
        self.repo.edit_references_as(Some(edit), None).map(|_| ()).map_err(|e| {
            // A failed write (full disk, no permission) is not a concurrent change.
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(error) = cause {
                if error.downcast_ref::<std::io::Error>().is_some() {
                    return VerbError::git(format!("writing {}", pin.as_str()), e);
                }
                cause = error.source();
            }
            VerbError::RefConflict {
                name: pin.as_str().to_owned(),
                message: crate::verbs::error_chain(&e),
            }
        })
    }

    /// Every ref under `refs/ckpt/`, with the object it points at. Names that are not valid pin
    /// refs are returned separately so callers can report them.
    pub fn list_pins(&self) -> Result<PinListing, VerbError> {
        let platform = self.repo.references().map_err(|e| VerbError::git("listing refs", e))?;
        let iter = platform
            .prefixed("refs/ckpt/")
            .map_err(|e| VerbError::git("listing refs/ckpt/", e))?;
        let mut pins = Vec::new();
        let mut foreign = Vec::new();
        for reference in iter {
            let reference = reference.map_err(|e| VerbError::git("reading a ref under refs/ckpt/", e))?;
            let name = reference.name().as_bstr().to_str_lossy().into_owned();
            if PinRef::is_quarantine_name(&name) {
                continue;
            }
            match (PinRef::parse(&name), reference.target().try_id()) {
                (Ok(pin), Some(id)) => pins.push((pin, ObjectId(id.to_owned()))),
                _ => foreign.push(name),
            }
        }
        Ok((pins, foreign))
    }

    /// What every ref under `refs/ckpt/` points at — pins, quarantined pins and names that are
    /// not pins alike: all of it must stay alive in a store ckpt collects itself.
    pub fn ckpt_ref_targets(&self) -> Result<Vec<ObjectId>, VerbError> {
        let platform = self.repo.references().map_err(|e| VerbError::git("listing refs", e))?;
        let iter = platform
            .prefixed("refs/ckpt/")
            .map_err(|e| VerbError::git("listing refs/ckpt/", e))?;
        let mut targets = Vec::new();
        for reference in iter {
            let reference = reference.map_err(|e| VerbError::git("reading a ref under refs/ckpt/", e))?;
            if let Some(id) = reference.target().try_id() {
                targets.push(ObjectId(id.to_owned()));
            }
        }
        Ok(targets)
    }

    /// The object a pin ref points at now, if it exists.
    pub fn read_pin(&self, pin: &PinRef) -> Result<Option<ObjectId>, VerbError> {
        let found = self
            .repo
            .try_find_reference(pin.as_str())
            .map_err(|e| VerbError::git(format!("reading {}", pin.as_str()), e))?;
        Ok(found.and_then(|r| r.target().try_id().map(|id| ObjectId(id.to_owned()))))
    }
}
