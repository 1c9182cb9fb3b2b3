mod attempt;
pub use attempt::Attempts;

pub fn serve() -> Result<(), crate::error::Error> {
    Ok(())
}
