pub enum Error {
    NotServed { tried: crate::library::Attempts },
}
