pub fn run(_keep: bool, _out: &super::Output) -> Result<i32, crate::provider::CkptError> {
    Ok(0)
}
