pub struct Attempts(pub Vec<String>);
